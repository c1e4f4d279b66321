// Package docs checks the repository's Markdown: every relative link names a
// file that exists, every #anchor a heading that is there (as GitHub spells
// heading anchors), and no curl example uses --json, which curl before 7.82
// (Ubuntu 22.04's) does not know; and that the README's Quick start shows
// what the gateway really answers (quickstart_test.go runs its curl commands).
// It has no code of its own; see docs_test.go.
package docs
