package onceq_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var (
	// mdLink is a Markdown link's target: [text](target).
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// inlineCode is a code span, whose brackets are no link.
	inlineCode = regexp.MustCompile("`[^`]*`")
)

// TestDocLinks checks every relative link of README.md, CHANGELOG.md and docs/*.md: the
// file it names exists, and so does the heading its #fragment names
// (GitHub's anchors: the heading in lower case, without punctuation,
// spaces as '-'). Code blocks and code spans are not read.
func TestDocLinks(t *testing.T) {
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files := append([]string{"README.md", "CHANGELOG.md"}, docs...)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		a := map[string]bool{}
		seen := map[string]int{}
		for _, line := range proseLines(string(b)) {
			if !strings.HasPrefix(line, "#") {
				continue
			}
			title := strings.TrimSpace(strings.TrimLeft(line, "#"))
			slug := headingAnchor(title)
			if n := seen[slug]; n > 0 {
				a[slug+"-"+strconv.Itoa(n)] = true
			} else {
				a[slug] = true
			}
			seen[slug]++
		}
		anchors[path] = a
		return a
	}
	links := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range proseLines(string(b)) {
			line = inlineCode.ReplaceAllString(line, "")
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				path, frag, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), path)
					if _, err := os.Stat(dest); err != nil {
						t.Errorf("%s, prose line %d: link %s: %v", file, n+1, target, err)
						continue
					}
				}
				if frag == "" {
					continue
				}
				if !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s, prose line %d: link %s: a fragment of a file that is not Markdown", file, n+1, target)
					continue
				}
				if !anchorsOf(dest)[frag] {
					t.Errorf("%s, prose line %d: link %s: %s has no heading #%s", file, n+1, target, dest, frag)
				}
			}
		}
	}
	if links == 0 {
		t.Fatal("no relative links found in README.md and docs/*.md: the link pattern reads nothing")
	}
}

// proseLines returns the lines of a Markdown text outside fenced code
// blocks (a code line reads as blank, so numbering holds).
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	in := false
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			in = !in
			lines[i] = ""
			continue
		}
		if in {
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchor is GitHub's anchor of a heading: lower case, letters,
// digits, '-' and '_' kept, spaces as '-', the rest dropped.
func headingAnchor(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}
