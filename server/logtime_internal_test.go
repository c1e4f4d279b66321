package server

import (
	"bytes"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
)

// TestStampHookAsTimestamp: a line stamped by stampHook is byte for byte
// the line zerolog's own Timestamp writes, on every call, also after the
// second turns (its cache then holds the previous second).
func TestStampHookAsTimestamp(t *testing.T) {
	var ours, theirs bytes.Buffer
	a := zerolog.New(&ours).Hook(&stampHook{})
	b := zerolog.New(&theirs).With().Timestamp().Logger()
	for i := 0; i < 3; i++ {
		for {
			ours.Reset()
			theirs.Reset()
			before := time.Now().Unix()
			a.Info().Str("k", "v").Msg("m")
			b.Info().Str("k", "v").Msg("m")
			if time.Now().Unix() == before {
				break // both lines in the same second
			}
		}
		assert.Equal(t, theirs.String(), ours.String())
		assert.Contains(t, ours.String(), `"time":"`)
		time.Sleep(400 * time.Millisecond) // one of the rounds crosses a second
	}
}
