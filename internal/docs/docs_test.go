package docs

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDocs walks every Markdown file of the repository (node_modules and
// dot-directories left out) and fails naming each broken link and each curl
// --json.
func TestDocs(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	files := markdownFiles(t, root)
	require.Contains(t, files, filepath.Join(root, "README.md"), "the walk must see the README")
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		for _, problem := range check(f) {
			t.Errorf("%s: %s", rel, problem)
		}
	}
}

// TestCheck: the checker itself finds what it is for, on a throwaway tree.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		return p
	}
	write("docs/api.md", "# API\n\n## Who \"the user\" is\n\n## `LOCKGW_MAX_TTL` and *more*\n\n## Errors\n\n## Errors\n")
	readme := write("README.md", strings.Join([]string{
		"# lockgateway",
		"## API gateways (nginx, Traefik, Envoy)",
		"[ok](docs/api.md) [ok](docs/api.md#who-the-user-is) [ok](docs/api.md#lockgw_max_ttl-and-more)",
		"[ok](docs/api.md#errors-1) [ok](#api-gateways-nginx-traefik-envoy) [ok](https://example.com/x.md)",
		"[ok](docs/) ![ok](docs/api.md \"title\")",
		"[missing file](docs/nope.md)",
		"[missing anchor](docs/api.md#errors-2)",
		"[missing local anchor](#quick-start)",
		"```sh",
		"[in a code block](not-a-link.md)",
		"curl -s -X PUT localhost:8080/locks/a --json '{}'",
		"```",
		"`[in code](nope.md)`, no curl --json here, but `curl -X PUT localhost:8080/locks/a --json '{}'` is one",
		"```console",
		"$ curl -s -X PUT localhost:8080/locks/a \\",
		"    --json '{}'",
		"$ lockctl --json status a",
		"```",
		"",
		"[ref]: docs/missing.md",
	}, "\n")+"\n")
	got := check(readme)
	assert.Equal(t, []string{
		`line 6: link "docs/nope.md": no such file`,
		`line 7: link "docs/api.md#errors-2": api.md has no heading #errors-2`,
		`line 8: link "#quick-start": README.md has no heading #quick-start`,
		`line 11: curl --json needs curl 7.82; write -H 'Content-Type: application/json' -d '…'`,
		`line 13: curl --json needs curl 7.82; write -H 'Content-Type: application/json' -d '…'`,
		`line 15: curl --json needs curl 7.82; write -H 'Content-Type: application/json' -d '…'`,
		`line 20: link "docs/missing.md": no such file`,
	}, got)
}

func TestAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Quick start":                                  "quick-start",
		"API gateways (nginx, Traefik, Envoy)":         "api-gateways-nginx-traefik-envoy",
		`Who "the user" is`:                            "who-the-user-is",
		"Fences: why a counter that expires is enough": "fences-why-a-counter-that-expires-is-enough",
		"Floods: what one client costs the others":     "floods-what-one-client-costs-the-others",
		"`lockctl`":                        "lockctl",
		"[Redlock](#redlock) nodes":        "redlock-nodes",
		"Memory and bounds":                "memory-and-bounds",
		"Redis Sentinel and Redis Cluster": "redis-sentinel-and-redis-cluster",
	} {
		assert.Equal(t, want, anchor(heading), heading)
	}
}

func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			files = append(files, p)
		}
		return nil
	})
	require.NoError(t, err)
	return files
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s|$)`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	// curl given a body with --json: `curl … --json '{…}'`, or --json=….
	curlJSON = regexp.MustCompile(`\bcurl\s.*\s--json(\s+['"{@]|=)`)
)

// doc is a Markdown file read once: its lines outside code blocks, the
// lines of its code blocks, and the anchors of its headings.
type doc struct {
	lines   int
	prose   map[int]string // line number → text, code spans removed
	raw     map[int]string // the same lines as they are
	code    map[int]string // line number → a code block's line
	anchors map[string]bool
}

var docs = map[string]*doc{}

func read(path string) (*doc, error) {
	if d, ok := docs[path]; ok {
		return d, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	d := &doc{prose: map[int]string{}, raw: map[int]string{}, code: map[int]string{}, anchors: map[string]bool{}}
	seen := map[string]int{}
	inCode := ""
	lines := strings.Split(string(b), "\n")
	d.lines = len(lines)
	for i, line := range lines {
		n := i + 1
		if m := fence.FindStringSubmatch(line); m != nil {
			switch {
			case inCode == "":
				inCode = m[1]
				continue
			case inCode == m[1]:
				inCode = ""
				continue
			}
		}
		if inCode != "" {
			d.code[n] = line
			continue
		}
		d.raw[n] = line
		d.prose[n] = codeSpan.ReplaceAllStringFunc(line, func(s string) string { return "" })
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			d.anchors[m[1]] = true
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			a := anchor(m[1])
			if k := seen[a]; k > 0 {
				d.anchors[fmt.Sprintf("%s-%d", a, k)] = true
			} else {
				d.anchors[a] = true
			}
			seen[a]++
		}
	}
	docs[path] = d
	return d, nil
}

// anchor is GitHub's id for a heading: the text as shown, lower-cased,
// without punctuation but hyphens and underscores, spaces made hyphens.
func anchor(text string) string {
	text = inlineLink.ReplaceAllStringFunc(text, func(s string) string {
		return s[strings.Index(s, "[")+1 : strings.Index(s, "]")]
	})
	text = strings.NewReplacer("`", "", "*", "").Replace(text)
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// check returns what is wrong with the file at path, one line each.
func check(path string) []string {
	d, err := read(path)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	for n := 1; n <= d.lines; n++ {
		if line, ok := d.prose[n]; ok {
			var targets []string
			for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
				targets = append(targets, m[1])
			}
			if m := refLink.FindStringSubmatch(line); m != nil {
				targets = append(targets, m[1])
			}
			for _, target := range targets {
				if p := checkLink(path, target); p != "" {
					problems = append(problems, fmt.Sprintf("line %d: link %q: %s", n, target, p))
				}
			}
		}
		if line, ok := d.code[n]; ok {
			// A command continued with \ is read as one line, named by its first.
			start := n
			for strings.HasSuffix(strings.TrimSpace(line), `\`) {
				next, ok := d.code[n+1]
				if !ok {
					break
				}
				n++
				line = strings.TrimSuffix(strings.TrimSpace(line), `\`) + " " + next
			}
			if curlJSON.MatchString(line) {
				problems = append(problems, fmt.Sprintf("line %d: curl --json needs curl 7.82; write -H 'Content-Type: application/json' -d '…'", start))
			}
		} else if raw, ok := d.raw[n]; ok {
			for _, span := range codeSpan.FindAllString(raw, -1) {
				if curlJSON.MatchString(span) {
					problems = append(problems, fmt.Sprintf("line %d: curl --json needs curl 7.82; write -H 'Content-Type: application/json' -d '…'", n))
				}
			}
		}
	}
	return problems
}

// checkLink says what is wrong with a link from the file at from, or "".
func checkLink(from, target string) string {
	if scheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return "" // another site: not checked here
	}
	file, frag, _ := strings.Cut(target, "#")
	file, err := url.PathUnescape(file)
	if err != nil {
		return err.Error()
	}
	path := from
	if file != "" {
		if strings.HasPrefix(file, "/") {
			return "an absolute path; write it relative to this file"
		}
		path = filepath.Join(filepath.Dir(from), file)
		if _, err := os.Stat(path); err != nil {
			return "no such file"
		}
	}
	if frag == "" {
		return ""
	}
	if !strings.HasSuffix(path, ".md") {
		return "an anchor into a file that is not Markdown"
	}
	d, err := read(path)
	if err != nil {
		return err.Error()
	}
	if !d.anchors[frag] {
		return fmt.Sprintf("%s has no heading #%s", filepath.Base(path), frag)
	}
	return ""
}
