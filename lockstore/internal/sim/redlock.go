// The simulator runs one goroutine at a time, so the race detector finds
// nothing in it, and slows its Lua interpreter several times over: make
// test runs it without -race (Makefile, test).

package sim

import (
	"fmt"
)

func (r Run) RedlockReport() string {
	v := r.Violation
	return fmt.Sprintf("seed %d: %s at %.3f ms on %s: %s\n%s", r.Seed, v.Check, float64(v.at)/1000, v.key, v.msg, r.Trace)
}
