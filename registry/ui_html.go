package registry

import "bytes"

// markup is HTML written as it is. Only constants convert to it
// implicitly, so a job ID, a reason or any other string from outside
// cannot reach the page unescaped without a visible conversion.
type markup string

// htmlWriter writes a page. It is what html/template would be, were it
// not for its cost: text/template looks methods up by name through
// reflect, which makes the linker keep every exported method of every
// type in the binary (19 MB grew to 31 MB; see
// internal/initbudget/deadcode_test.go).
type htmlWriter struct{ b bytes.Buffer }

// m writes markup.
func (h *htmlWriter) m(s markup) *htmlWriter {
	h.b.WriteString(string(s))
	return h
}

// t writes text, escaped: it is never markup.
func (h *htmlWriter) t(s string) *htmlWriter {
	escapeHTML(&h.b, s)
	return h
}

// escapeHTML writes s with the five characters that can end text or a
// quoted attribute value escaped. (Package html's EscapeString does the
// same, but linking package html brings its table of 2,000 entities.)
func escapeHTML(b *bytes.Buffer, s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		case '"':
			b.WriteString("&#34;")
		case '\'':
			b.WriteString("&#39;")
		default:
			b.WriteByte(c)
		}
	}
}

// a writes the attribute name="value", the value escaped.
func (h *htmlWriter) a(name markup, value string) *htmlWriter {
	h.b.WriteByte(' ')
	h.b.WriteString(string(name))
	h.b.WriteString(`="`)
	escapeHTML(&h.b, value)
	h.b.WriteByte('"')
	return h
}

// el writes <tag>text</tag>.
func (h *htmlWriter) el(tag markup, text string) *htmlWriter {
	return h.m("<" + tag + ">").t(text).m("</" + tag + ">")
}

// hidden writes a hidden form field.
func (h *htmlWriter) hidden(name markup, value string) *htmlWriter {
	return h.m(`<input type="hidden"`).a("name", string(name)).a("value", value).m(">")
}

// head writes the start of every page: its title, its style, its script
// when it follows changes, and the header with who is logged in.
func (h *htmlWriter) head(v *uiPage) {
	h.m("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n" +
		"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>").t(v.title + " · leasectl").m("</title>\n" +
		"<link rel=\"stylesheet\" href=\"/static/app.css\">\n")
	if v.live {
		h.m("<script src=\"/static/app.js\" defer></script>\n")
	}
	h.m("</head>\n<body>\n<header>\n<nav><a href=\"/\">Jobs</a> <a href=\"/quarantine\">Quarantined</a></nav>\n")
	if v.csrf != "" {
		h.m(`<form method="post" action="/logout" class="who"><span id="who">`).t(v.name+" ("+v.role+")").m("</span> ").
			hidden("csrf", v.csrf).m(`<button type="submit" id="logout">Log out</button></form>` + "\n")
	}
	h.m("</header>\n<p id=\"contact\" role=\"status\" hidden></p>\n<main>\n")
}

// foot writes the end of every page.
func (h *htmlWriter) foot() {
	h.m("</main>\n</body>\n</html>\n")
}
