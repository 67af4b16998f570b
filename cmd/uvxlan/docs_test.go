package main

// The documents against the code: every flag of `uvxlan run --help` in
// docs/configuration.md and no other, every drop reason of encap/stats.go
// in docs/operations.md and no other, and every relative link of README.md
// and docs/*.md to a file (and heading) that exists. The README's own
// commands run in TestReadmeClusterByHand.

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/uvxlan/uvxlan/encap"
)

// repoRoot is where README.md and docs/ are, from this package's directory.
var repoRoot = filepath.Join("..", "..")

// readDoc returns a document of the repository, by its path from the root.
func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section returns the text of md under the heading whose text is title
// (any level), up to the next heading of the same or a higher level.
func section(t *testing.T, md, title string) string {
	t.Helper()
	lines := strings.Split(md, "\n")
	start, level := -1, 0
	for i, l := range lines {
		h := strings.TrimLeft(l, "#")
		n := len(l) - len(h)
		if n == 0 || !strings.HasPrefix(h, " ") {
			continue
		}
		if start < 0 {
			if strings.TrimSpace(h) == title {
				start, level = i+1, n
			}
			continue
		}
		if n <= level {
			return strings.Join(lines[start:i], "\n")
		}
	}
	if start < 0 {
		t.Fatalf("no heading %q", title)
	}
	return strings.Join(lines[start:], "\n")
}

// firstCells returns the first cell of every row of the Markdown tables in
// md, header and separator rows left out.
func firstCells(md string) []string {
	var cells []string
	for _, l := range strings.Split(md, "\n") {
		if !strings.HasPrefix(l, "|") {
			continue
		}
		c := strings.TrimSpace(strings.Split(l, "|")[1])
		if c == "" || strings.Trim(c, "-") == "" || !strings.HasPrefix(c, "`") {
			continue // the separator, or a header row
		}
		cells = append(cells, c)
	}
	return cells
}

var longFlag = regexp.MustCompile(`(?:^|[\s` + "`" + `,])--([a-z0-9][a-z0-9-]*)`)

// flagNames returns the long flags named in s (--name), sorted, once each.
func flagNames(s string) []string {
	var names []string
	for _, m := range longFlag.FindAllStringSubmatch(s, -1) {
		names = append(names, m[1])
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// helpFlags returns the flags that args' --help lists in its OPTIONS, without
// --help itself.
func helpFlags(t *testing.T, args ...string) []string {
	t.Helper()
	var out bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &out
	if err := app.Run(append(append([]string{"uvxlan"}, args...), "--help")); err != nil {
		t.Fatalf("%s --help: %v", strings.Join(args, " "), err)
	}
	_, opts, ok := strings.Cut(out.String(), "OPTIONS:\n")
	if !ok {
		t.Fatalf("%s --help prints no OPTIONS:\n%s", strings.Join(args, " "), out.String())
	}
	var names []string
	for _, l := range strings.Split(opts, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "--") {
			continue // a category's title, or a blank line
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(l, "--"), " ")
		name = strings.TrimSuffix(name, ",")
		if name != "help" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// diff reports the names of want missing from got and those of got not in
// want.
func diff(want, got []string) (missing, extra []string) {
	for _, w := range want {
		if !slices.Contains(got, w) {
			missing = append(missing, w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			extra = append(extra, g)
		}
	}
	return missing, extra
}

// Every flag `uvxlan run --help` lists has a row in docs/configuration.md's
// table of run flags, and every row there is a flag of --help; the same for
// the global flags of `uvxlan --help`.
func TestDocsRunFlags(t *testing.T) {
	doc := readDoc(t, "docs/configuration.md")
	for _, c := range []struct {
		desc    string
		args    []string
		heading string
	}{
		{"uvxlan run", []string{"run"}, "`uvxlan run` flags"},
		{"uvxlan (global)", nil, "Global flags"},
	} {
		help := helpFlags(t, c.args...)
		if len(help) < 1 {
			t.Fatalf("%s --help: no flags found", c.desc)
		}
		var documented []string
		for _, cell := range firstCells(section(t, doc, c.heading)) {
			documented = append(documented, flagNames(cell)...)
		}
		slices.Sort(documented)
		documented = slices.Compact(documented)
		missing, extra := diff(help, documented)
		if len(missing) > 0 {
			t.Errorf("%s --help has flags docs/configuration.md (%q) does not document: --%s", c.desc, c.heading, strings.Join(missing, ", --"))
		}
		if len(extra) > 0 {
			t.Errorf("docs/configuration.md (%q) documents flags %s --help does not have: --%s", c.heading, c.desc, strings.Join(extra, ", --"))
		}
		t.Logf("%s: %d flags in --help, %d documented", c.desc, len(help), len(documented))
	}
}

// Every drop reason declared in encap/stats.go has a row in
// docs/operations.md's table of drops, and every row there is a reason the
// code still has.
func TestDocsDropReasons(t *testing.T) {
	var code []string
	for r := range encap.NumDropReasons {
		code = append(code, r.String())
	}
	slices.Sort(code)
	var documented []string
	for _, cell := range firstCells(section(t, readDoc(t, "docs/operations.md"), "Drops")) {
		documented = append(documented, strings.Trim(cell, "`"))
	}
	slices.Sort(documented)
	if d := slices.Compact(slices.Clone(documented)); len(d) != len(documented) {
		t.Errorf("docs/operations.md lists a drop reason twice: %q", documented)
	}
	missing, extra := diff(code, documented)
	if len(missing) > 0 {
		t.Errorf("drop reasons of encap/stats.go missing from docs/operations.md's Drops: %q", missing)
	}
	if len(extra) > 0 {
		t.Errorf("docs/operations.md's Drops lists reasons the code does not have: %q", extra)
	}
	t.Logf("%d drop reasons in the code, %d documented", len(code), len(documented))
}

// docFiles returns README.md and every Markdown file under docs/, by their
// paths from the root.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	m, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m) == 0 {
		t.Fatal("no docs/*.md")
	}
	for _, f := range m {
		rel, err := filepath.Rel(repoRoot, f)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, rel)
	}
	return files
}

// anchor returns the id GitHub gives a heading's text: lower case, without
// punctuation but hyphens and underscores, spaces made hyphens.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the ids of md's headings (outside code blocks).
func anchors(md string) map[string]bool {
	ids := map[string]bool{}
	code := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "```") {
			code = !code
			continue
		}
		if code || !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimLeft(l, "#")
		if !strings.HasPrefix(h, " ") {
			continue
		}
		ids[anchor(h)] = true
	}
	return ids
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every relative link of README.md and docs/*.md names a file that exists,
// and a heading of it when it has a #fragment.
func TestDocsLinks(t *testing.T) {
	links := 0
	for _, file := range docFiles(t) {
		md := readDoc(t, file)
		for _, m := range mdLink.FindAllStringSubmatch(md, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			path, frag, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(filepath.Join(repoRoot, dest)); err != nil {
					t.Errorf("%s: link %q: %v", file, target, err)
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s: link %q: a fragment into a file that is not Markdown", file, target)
				continue
			}
			if !anchors(readDoc(t, dest))[frag] {
				t.Errorf("%s: link %q: %s has no heading #%s", file, target, dest, frag)
			}
		}
	}
	t.Logf("%d relative links checked", links)
}
