package inspect

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"

	"github.com/leasectl/leasectl/leasestore"
)

// Format is how a Printer writes results.
type Format int

// Output formats.
const (
	// FormatTable draws lipgloss tables with relative ages, for a terminal.
	FormatTable Format = iota
	// FormatPlain writes one tab-separated line per row, without a header,
	// with RFC 3339 times and Go durations, for cut, awk and scripts.
	FormatPlain
	// FormatJSON writes the documented JSON schema (see the package doc).
	FormatJSON
)

// FormatFor picks the format a command should use: JSON when asked, a
// table when stdout is a terminal, tab-separated lines otherwise.
func FormatFor(stdoutTTY, asJSON bool) Format {
	switch {
	case asJSON:
		return FormatJSON
	case stdoutTTY:
		return FormatTable
	default:
		return FormatPlain
	}
}

// Printer writes results to Out in one Format. Messages that are not data
// (an empty result when piped) go to ErrOut, so stdout stays parseable.
type Printer struct {
	Out    io.Writer
	ErrOut io.Writer
	Format Format
	// Now is the clock relative ages are computed against when the store
	// did not report its own (listing leases).
	Now time.Time
	// Width is the terminal's width in columns: tables and records are
	// fitted to it, truncating the widest columns, so that no line wraps
	// (as gh does). 0 fits nothing.
	Width int
}

// cell is one table cell: text is shown on a terminal, plain when piped.
type cell struct {
	text, plain string
	tone        tone // colour on a terminal
}

// tone is how a cell is coloured on a terminal.
type tone int

const (
	toneNone  tone = iota
	toneGood       // healthy: running, completed
	toneBad        // needs attention: crashed, quarantined, failed
	toneFaint      // nothing to see: idle
)

// grid is a table of cells with its column headers.
type grid struct {
	headers []string
	rows    [][]cell
	// text marks the columns of free text (names, reasons), which a
	// terminal too narrow for the table truncates; the others (tokens,
	// times, counts) are never cut. Nil marks none.
	text []bool
}

// textColumns marks the columns named by headers as free text.
func textColumns(all []string, text ...string) []bool {
	marks := make([]bool, len(all))
	for i, h := range all {
		marks[i] = slices.Contains(text, h)
	}
	return marks
}

func textCell(s string) cell { return cell{text: s, plain: s} }

func intCell(n int64) cell { return textCell(strconv.FormatInt(n, 10)) }

// agoCell shows t relative to now on a terminal ("3m ago", "in 12s") and
// as an RFC 3339 time when piped; see optional for a zero t.
func agoCell(t, now time.Time) cell {
	if t.IsZero() {
		return optional("")
	}
	return cell{text: relative(t, now), plain: formatTime(t)}
}

// durationCell shows d compactly on a terminal ("3m12s") and as a Go
// duration rounded to the millisecond when piped.
func durationCell(d time.Duration) cell {
	return cell{text: shortDuration(d), plain: d.Round(time.Millisecond).String()}
}

// relative says how far t is from now: "3m ago", "in 12s", "now".
func relative(t, now time.Time) string {
	d := now.Sub(t)
	switch {
	case d >= time.Second:
		return shortDuration(d) + " ago"
	case d <= -time.Second:
		return "in " + shortDuration(-d)
	default:
		return "now"
	}
}

// shortDuration writes d with at most two units: "850ms", "12s", "3m12s",
// "2h5m", "3d4h". Negative durations count as zero.
func shortDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	const day = 24 * time.Hour
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return twoUnits(int(d/time.Minute), "m", int(d%time.Minute/time.Second), "s")
	case d < day:
		return twoUnits(int(d/time.Hour), "h", int(d%time.Hour/time.Minute), "m")
	default:
		return twoUnits(int(d/day), "d", int(d%day/time.Hour), "h")
	}
}

func twoUnits(major int, mu string, minor int, nu string) string {
	if minor == 0 {
		return fmt.Sprintf("%d%s", major, mu)
	}
	return fmt.Sprintf("%d%s%d%s", major, mu, minor, nu)
}

// timeLayout is RFC 3339 with milliseconds, always in UTC.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// styles are built per render, never at package initialisation, so that
// commands which print nothing pay nothing for lipgloss.
type styles struct {
	header, cell, border, key, good, bad, faint lipgloss.Style
}

// paint renders c's text in its tone.
func (st styles) paint(c cell) string {
	switch c.tone {
	case toneGood:
		return st.good.Render(c.text)
	case toneBad:
		return st.bad.Render(c.text)
	case toneFaint:
		return st.faint.Render(c.text)
	default:
		return c.text
	}
}

func newStyles(w io.Writer) styles {
	r := lipgloss.NewRenderer(w)
	return styles{
		header: r.NewStyle().Bold(true).Padding(0, 1),
		cell:   r.NewStyle().Padding(0, 1),
		border: r.NewStyle().Faint(true),
		key:    r.NewStyle().Bold(true),
		good:   r.NewStyle().Foreground(lipgloss.Color("2")),
		bad:    r.NewStyle().Foreground(lipgloss.Color("1")).Bold(true),
		faint:  r.NewStyle().Faint(true),
	}
}

// writeGrid writes g as a table on a terminal or as tab-separated lines.
// A line of a list leaves out its trailing empty fields (an unknown round
// trip), so that none ends in a tab; a key and its value stay two fields,
// so that cut -f2 never prints the key.
func (p *Printer) writeGrid(g grid) error {
	if p.Format != FormatTable {
		var b strings.Builder
		for _, row := range g.rows {
			for len(row) > 2 && row[len(row)-1].plain == "" {
				row = row[:len(row)-1]
			}
			for i, c := range row {
				if i > 0 {
					b.WriteByte('\t')
				}
				b.WriteString(sanitize(c.plain))
			}
			b.WriteByte('\n')
		}
		_, err := io.WriteString(p.Out, b.String())
		return err
	}
	st := newStyles(p.Out)
	widths := fitColumns(g, p.Width)
	headers := make([]string, len(g.headers))
	for j, h := range g.headers {
		headers[j] = truncate(h, widths[j])
	}
	rows := make([][]string, len(g.rows))
	for i, row := range g.rows {
		rows[i] = make([]string, len(row))
		for j, c := range row {
			c.text = truncate(c.text, widths[j])
			rows[i][j] = st.paint(c)
		}
	}
	t := table.New().
		Border(lipgloss.RoundedBorder()).
		BorderStyle(st.border).
		Headers(headers...).
		Rows(rows...).
		StyleFunc(func(row, _ int) lipgloss.Style {
			if row == table.HeaderRow {
				return st.header
			}
			return st.cell
		})
	_, err := fmt.Fprintln(p.Out, t.Render())
	return err
}

// minColumn is the narrowest a column is truncated to: a few characters
// and the ellipsis still tell values apart.
const minColumn = 6

// fitColumns returns each column's width on a terminal of width columns:
// its widest text, or less when the table would be wider than the
// terminal, taken from the widest text column first (a long worker ID or
// reason gives way before a job name does). A table that cannot fit even
// so keeps minColumn per text column, and wraps. Width 0 fits nothing.
func fitColumns(g grid, width int) []int {
	widths := make([]int, len(g.headers))
	for j, h := range g.headers {
		widths[j] = lipgloss.Width(h)
	}
	for _, row := range g.rows {
		for j, c := range row {
			widths[j] = max(widths[j], lipgloss.Width(c.text))
		}
	}
	if width <= 0 {
		return widths
	}
	// A rounded table with cells padded by one space on each side: each
	// column takes its text, two spaces and one border, plus one border.
	over := 1 - width
	for _, w := range widths {
		over += w + 3
	}
	for over > 0 {
		widest := -1
		for j, w := range widths {
			if j < len(g.text) && g.text[j] && (widest < 0 || w >= widths[widest]) {
				widest = j
			}
		}
		if widest < 0 || widths[widest] <= minColumn {
			break
		}
		widths[widest]--
		over--
	}
	return widths
}

// truncate shortens s to at most width columns, ending it with "…" when it
// was longer.
func truncate(s string, width int) string {
	if lipgloss.Width(s) <= width {
		return s
	}
	var b strings.Builder
	used := 0
	for _, r := range s {
		w := lipgloss.Width(string(r))
		if used+w > width-1 {
			break
		}
		b.WriteRune(r)
		used += w
	}
	return b.String() + "…"
}

// sanitize keeps a field on its line and in its column when piped.
func sanitize(s string) string {
	return strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(s)
}

// writeJSON writes v as indented JSON followed by a newline.
func (p *Printer) writeJSON(v any) error {
	enc := json.NewEncoder(p.Out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// marshalLine encodes v as one line of JSON Lines.
func marshalLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// empty says that a listing found nothing: on stdout on a terminal, on
// stderr when piped (stdout then stays empty, so `| wc -l` counts 0), and
// as an empty JSON array with --json.
func (p *Printer) empty(msg string) error {
	var err error
	switch p.Format {
	case FormatJSON:
		_, err = io.WriteString(p.Out, "[]\n")
	case FormatTable:
		_, err = fmt.Fprintln(p.Out, msg)
	default:
		_, err = fmt.Fprintln(p.ErrOut, msg)
	}
	return err
}

// field is one line of a record: label is shown on a terminal, key names
// it in the tab-separated form ("key<TAB>value"). A field without a label
// is only written piped, one without a key only on a terminal.
type field struct {
	label, key string
	value      cell
}

// writeRecord writes one object's fields, then its recent history: on a
// terminal as aligned "label value" lines and a table; when piped as
// "key<TAB>value" lines and one "history<TAB>at<TAB>event<TAB>worker<TAB>
// token<TAB>detail" line per event. now is the store's clock.
func (p *Printer) writeRecord(fields []field, history []leasestore.Event, now time.Time) error {
	if p.Format != FormatTable {
		g := grid{}
		for _, f := range fields {
			if f.key != "" {
				g.rows = append(g.rows, []cell{textCell(f.key), f.value})
			}
		}
		for _, e := range history {
			g.rows = append(g.rows, append([]cell{textCell("history")}, eventCells(e, now)...))
		}
		return p.writeGrid(g)
	}
	st := newStyles(p.Out)
	width := 0
	for _, f := range fields {
		width = max(width, lipgloss.Width(f.label))
	}
	var b strings.Builder
	for _, f := range fields {
		if f.label == "" {
			continue
		}
		b.WriteString(st.key.Width(width + 2).Render(f.label))
		if p.Width > 0 {
			f.value.text = truncate(f.value.text, max(p.Width-width-2, minColumn))
		}
		b.WriteString(st.paint(f.value))
		b.WriteByte('\n')
	}
	if len(history) == 0 {
		b.WriteString("\nno history\n")
		_, err := io.WriteString(p.Out, b.String())
		return err
	}
	b.WriteString("\nrecent history (oldest first)\n")
	if _, err := io.WriteString(p.Out, b.String()); err != nil {
		return err
	}
	g := grid{headers: []string{"AT", "EVENT", "WORKER", "TOKEN", "DETAIL"}}
	g.text = textColumns(g.headers, "WORKER", "DETAIL")
	for _, e := range history {
		g.rows = append(g.rows, eventCells(e, now))
	}
	return p.writeGrid(g)
}

func eventCells(e leasestore.Event, now time.Time) []cell {
	return []cell{agoCell(e.At, now), textCell(string(e.Kind)), optional(e.Worker), tokenCell(e.Token), optional(e.Detail)}
}
