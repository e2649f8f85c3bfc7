package registry

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/registry/api"
)

// uiAction is an operator's action on a job from the page.
type uiAction struct {
	Path    string // where the form posts
	Verb    string // "Quarantine", "Release from quarantine", "Stop"
	Says    string // what the action does, if the verb does not say it all
	Job     string
	Reason  string
	Problem string // why the form was shown again, if it was
	act     func(ctx context.Context, job string, note leasestore.Note) error
}

func (a uiAction) title() string { return a.Verb + " " + a.Job + "?" }

func (s *Server) uiQuarantine(p *uiRequest) {
	s.uiAct(p, uiAction{Path: "/actions/quarantine", Verb: "Quarantine", act: s.cfg.Store.Quarantine})
}

func (s *Server) uiRelease(p *uiRequest) {
	s.uiAct(p, uiAction{Path: "/actions/release", Verb: "Release from quarantine", act: s.cfg.Store.ReleaseQuarantine})
}

func (s *Server) uiStop(p *uiRequest) {
	s.uiAct(p, uiAction{Path: "/actions/stop", Verb: "Stop", act: s.cfg.Store.Stop,
		Says: "The run learns it at its next renewal: its child gets SIGTERM, then SIGKILL after the run's --grace, " +
			"and the run ends as failed, stopped by you, which counts no crash."})
}

// uiAct does a under the operator's name once the form says it was
// confirmed; before, or when the reason is missing, it shows the
// confirmation form. Then it sends the browser to the job's page, where
// the action is in the history.
func (s *Server) uiAct(p *uiRequest, a uiAction) {
	a.Job, a.Reason = p.r.PostForm.Get("job"), strings.TrimSpace(p.r.PostForm.Get("reason"))
	p.x.job = a.Job
	n := api.NoteRequest{JobID: a.Job, By: p.se.name, Reason: a.Reason}
	job, note, err := n.Validate()
	var fe *api.FieldError
	switch {
	case errors.As(err, &fe) && fe.Field == "job_id":
		s.uiError(p, http.StatusBadRequest, err.Error())
		return
	case err != nil:
		a.Problem = err.Error()
	case a.Reason == "":
		a.Problem = "Give a reason: it is kept in the job's history."
	}
	if a.Problem != "" || p.r.PostForm.Get("confirm") != "yes" {
		status := http.StatusOK
		if a.Problem != "" {
			status = http.StatusBadRequest
		}
		s.render(p, status, a)
		return
	}
	ctx, cancel := context.WithTimeout(p.r.Context(), s.cfg.OpTimeout)
	defer cancel()
	switch err := a.act(ctx, job, note); {
	case errors.Is(err, leasestore.ErrNotRunning):
		s.uiError(p, http.StatusConflict, "Job "+job+" is not running: there is no run to stop. It may have ended since the page was loaded.")
		return
	case err != nil:
		s.uiStoreError(p, err)
		return
	}
	s.changed(job)
	http.Redirect(p.w, p.r, jobURL(job), http.StatusSeeOther)
}

// uiStoreError answers a store's refusal or failure with its words and
// the status the API would give it.
func (s *Server) uiStoreError(p *uiRequest, err error) {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		err = &leasestore.UnavailableError{Op: p.r.URL.Path, Err: err}
	}
	e := api.FromError(err)
	s.uiError(p, e.Status(), e.Message)
}
