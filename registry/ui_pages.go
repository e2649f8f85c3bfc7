package registry

import (
	"fmt"
	"strings"

	"github.com/leasectl/leasectl/leasestore"
)

// The pages' content. Every string from outside (job IDs, reasons,
// names, holders) goes through htmlWriter.t or .a, escaped.

func (e errorPage) write(h *htmlWriter, _ *uiPage) {
	h.m("<h1>Not done</h1>\n<p class=\"problem\" role=\"alert\" id=\"problem\">").t(e.Message).m("</p>\n" +
		"<p><a href=\"/\">Back to the jobs</a></p>\n")
}

func (l loginPage) write(h *htmlWriter, _ *uiPage) {
	h.m("<h1>Log in to the registry</h1>\n")
	if l.Error != "" {
		h.m(`<p class="problem" role="alert">`).t(l.Error).m("</p>\n")
	}
	h.m(`<form method="post" action="/login" class="stack">`+"\n"+
		`<label>Your name <input name="name" id="name"`).a("value", l.Name).m(` required maxlength="200" autocomplete="name"></label>` + "\n" +
		`<label>Token <input name="token" id="token" type="password" required autocomplete="off"></label>` + "\n" +
		`<button type="submit" id="login">Log in</button>` + "\n</form>\n" +
		"<p>Use a token of the registry's tokens file. Your name is recorded with the actions you take: quarantine, release, stop.</p>\n")
}

// jobColumns are the jobs table's: the field of jobRow each shows (the
// page's script maps cells to fields by these) and its heading.
var jobColumns = [...]struct{ field, heading markup }{
	{"job", "Job"}, {"state", "State"}, {"stop", "Stop"}, {"holder", "Holder"}, {"token", "Token"}, {"since", "Since"},
	{"expires", "Lease expires"}, {"last", "Last outcome"}, {"last_success", "Last success"},
	{"crashes", "Crashes"}, {"quarantine", "Quarantine"},
}

// cells are r's fields in the order of jobColumns, the job's aside.
func (r jobRow) cells() []string {
	return []string{r.State, r.Stop, r.Holder, r.Token, r.Since, r.Expires, r.Last, r.LastSuccess, r.Crashes, r.Quarantine}
}

// row writes r as a row of the jobs table; cells are left unclosed, as
// HTML allows, to keep a page of many jobs light.
func (h *htmlWriter) row(r jobRow) {
	h.m("<tr").a("data-job", r.Job).a("data-state", r.State).m("><td><a").a("href", r.URL).m(">").t(r.Job).m("</a>")
	for _, c := range r.cells() {
		h.m("<td>").t(c)
	}
	h.m("\n")
}

func (jp jobsPage) write(h *htmlWriter, _ *uiPage) {
	h.m("<h1>Jobs</h1>\n<p class=\"counts\">")
	for _, c := range jp.Counts {
		h.m("<span>").t(c.State).m(" <b").a("data-count", c.State).m(">").t(fmt.Sprint(c.N)).m("</b></span> ")
	}
	h.m(`<span>shown <b id="shown">`).t(fmt.Sprint(len(jp.Rows))).m("</b></span></p>\n")
	if jp.More {
		h.m(`<p id="more">`).t(fmt.Sprintf("The store knows more than %d jobs: listed are the first %d by ID, and every running or quarantined job. "+
			"Open any job at /jobs/ followed by its ID.", jp.Listed, jp.Listed)).m("</p>\n")
	}
	h.m(`<div class="filters">` + "\n" + `<label>State <select id="state-filter"><option value="">all</option>`)
	for _, c := range jp.Counts {
		h.el("option", c.State)
	}
	h.m("</select></label>\n" +
		`<label>Search <input id="text-filter" type="search" placeholder="job, worker, host, reason"></label>` + "\n</div>\n" +
		"<div class=\"scroll\">\n<table id=\"jobs\">\n<thead><tr>\n")
	for _, c := range jobColumns {
		h.m(`<th><button type="button" data-sort="` + c.field + `">` + c.heading + "</button></th>\n")
	}
	h.m("</tr></thead>\n<tbody id=\"rows\">\n")
	for _, r := range jp.Rows {
		h.row(r)
	}
	h.m("</tbody>\n</table>\n</div>\n<template id=\"row-template\"><table><tbody>")
	h.row(jobRow{})
	h.m("</tbody></table></template>\n")
}

// recordField is a field of a job's page that follows changes: its name
// in jobRow's JSON, its heading and its value.
type recordField struct {
	field, heading markup
	value          string
}

// record are the fields of r that a job's page shows and follows.
func (r jobRow) record() []recordField {
	return []recordField{
		{"state", "State", r.State}, {"stop", "Stop", r.Stop}, {"holder", "Holder", r.Holder}, {"token", "Token", r.Token},
		{"since", "Since", r.Since}, {"expires", "Lease expires", r.Expires}, {"last", "Last outcome", r.Last},
		{"last_success", "Last success", r.LastSuccess}, {"crashes", "Consecutive crashes", r.Crashes},
		{"quarantine", "Quarantine", r.Quarantine},
	}
}

func (jp jobPage) write(h *htmlWriter, v *uiPage) {
	r, st := jp.Row, jp.Status
	h.m(`<h1>Job <span class="jobid">`).t(r.Job).m("</span></h1>\n<section id=\"record\"").a("data-job", r.Job).a("data-state", r.State).m(">\n<dl>\n")
	for _, f := range r.record() {
		h.m("<dt>" + f.heading + `</dt><dd data-field="` + f.field + `">`).t(f.value).m("</dd>\n")
	}
	h.m("<dt>Attempts</dt>").el("dd", fmt.Sprint(st.Attempts)).m("\n")
	if st.Region != "" {
		h.m("<dt>Region</dt>").el("dd", st.Region).m("\n")
	}
	if st.Holder != nil {
		h.m("<dt>Command</dt><dd><code>").t(strings.Join(st.Holder.Command, " ")).m("</code></dd>\n")
	}
	h.m("</dl>\n</section>\n")
	if v.operator {
		quarantined := r.State == string(leasestore.StateQuarantined)
		h.m("<section class=\"actions\">\n")
		h.actionForm(v, r.Job, "/actions/quarantine", "not-quarantined", "quarantine", "Quarantine…", quarantined)
		h.actionForm(v, r.Job, "/actions/release", "quarantined", "release", "Release from quarantine…", !quarantined)
		h.actionForm(v, r.Job, "/actions/stop", "held", "stop", "Stop the run…", r.Holder == "")
		h.m("</section>\n")
	}
	h.m("<h2>History</h2>\n<ol class=\"timeline\" id=\"history\">\n")
	for _, e := range jp.History {
		h.m("<li><time>").t(uiTime(e.At)).m("</time> ").el("b", string(e.Kind))
		// An operator's action's detail already says who and why.
		if e.Worker != "" && e.Kind != leasestore.EventQuarantined && e.Kind != leasestore.EventUnquarantine && e.Kind != leasestore.EventStop {
			h.t(" by " + e.Worker)
		}
		if e.Token != 0 {
			h.t(fmt.Sprintf(", token %d", e.Token))
		}
		if e.Detail != "" {
			h.t(" — " + e.Detail)
		}
		h.m("</li>\n")
	}
	if len(jp.History) == 0 {
		h.m("<li>No history yet.</li>\n")
	}
	h.m("</ol>\n")
}

// actionForm writes the form that asks for a reason before an operator's
// action; the page's script shows it only in the state named by when.
func (h *htmlWriter) actionForm(v *uiPage, job string, action, when, id, label markup, hide bool) {
	h.m(`<form method="post" action="` + action + `" data-when="` + when + `" class="stack"`)
	if hide {
		h.m(" hidden")
	}
	h.m(">\n").hidden("csrf", v.csrf).hidden("job", job).
		m(`<label>Reason <input name="reason" id="` + id + `-reason" required></label>` + "\n" +
			`<button type="submit" id="` + id + `">` + label + "</button>\n</form>\n")
}

func (a uiAction) write(h *htmlWriter, v *uiPage) {
	h.el("h1", a.Verb+" "+a.Job+"?").m("\n")
	if a.Problem != "" {
		h.m(`<p class="problem" role="alert" id="problem">`).t(a.Problem).m("</p>\n")
	}
	h.m(`<form method="post" class="stack"`).a("action", a.Path).m(">\n").
		hidden("csrf", v.csrf).hidden("job", a.Job).hidden("confirm", "yes").
		m(`<label>Reason <textarea name="reason" required>`).t(a.Reason).m("</textarea></label>\n")
	if a.Says != "" {
		h.el("p", a.Says).m("\n")
	}
	h.m("<p>").
		t("This is recorded in the job's history under your name, "+v.name+".").m("</p>\n"+
		`<p><button type="submit" id="confirm">`).t("Yes: "+a.Verb).m("</button> <a").a("href", jobURL(a.Job)).m(">Cancel</a></p>\n</form>\n")
}

func (qp quarantinePage) write(h *htmlWriter, _ *uiPage) {
	h.m("<h1>Quarantined jobs</h1>\n")
	if len(qp.Jobs) == 0 {
		h.m("<p>No job is quarantined.</p>\n")
		return
	}
	h.m("<div class=\"scroll\"><table>\n<thead><tr><th>Job</th><th>Since</th><th>By</th><th>Reason</th><th>Crashes</th><th>Last holder</th></tr></thead>\n<tbody>\n")
	for _, q := range qp.Jobs {
		holder := q.LastHolder
		if q.LastHost != "" {
			holder += " on " + q.LastHost
		}
		h.m("<tr><td><a").a("href", jobURL(q.Job)).m(">").t(q.Job).m("</a></td>").
			el("td", uiTime(q.Since)).el("td", q.By).el("td", q.Reason).el("td", fmt.Sprint(q.Crashes)).el("td", holder).m("</tr>\n")
	}
	h.m("</tbody></table></div>\n")
}
