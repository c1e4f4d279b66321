package middleware

import (
	"strconv"
	"testing"
)

// TestAppendMillisAsZerolog: the access log's duration_ms is the text
// zerolog's Float64 wrote for micros/1000 (strconv's shortest 'f' form).
func TestAppendMillisAsZerolog(t *testing.T) {
	check := func(micros int64) {
		want := strconv.FormatFloat(float64(micros)/1000, 'f', -1, 64)
		if got := string(appendMillis(nil, micros)); got != want {
			t.Fatalf("appendMillis(%d) = %q, want %q", micros, got, want)
		}
	}
	for micros := int64(0); micros < 200_000; micros++ {
		check(micros)
	}
	for micros := int64(1); micros < 1<<53; micros = micros*3 + 7 {
		check(micros)
		check(micros + 999)
	}
}
