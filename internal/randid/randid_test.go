package randid_test

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/lockgateway/lockgateway/internal/randid"
)

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		bytes, chars int
	}{{16, 22}, {12, 16}} {
		a, b := randid.New(tc.bytes), randid.New(tc.bytes)
		assert.Regexp(t, regexp.MustCompile(`^[A-Za-z0-9_-]+$`), a)
		assert.Len(t, a, tc.chars)
		assert.NotEqual(t, a, b)
	}
}
