package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Hand-made holds, times in ms as in checkers_test.go.

func ev(name string, at, expires int64) HoldEvent {
	return HoldEvent{Name: name, At: at * ms, Expires: expires * ms, Fence: 7}
}

func lostEv(reason string, at, told int64) HoldEvent {
	e := ev("lost", at, told)
	e.Reason = reason
	return e
}

func aHold(token string, events ...HoldEvent) Hold {
	h := Hold{Key: "k", Token: token, Status: 201, Events: events}
	if n := len(events); n > 0 && events[n-1].final() {
		h.Closed = events[n-1].At
	}
	return h
}

func byChecker(v []Violation) map[string]int {
	m := map[string]int{}
	for _, x := range v {
		m[x.Checker]++
	}
	return m
}

func TestHoldView(t *testing.T) {
	cases := []struct {
		name        string
		h           Hold
		from, until int64
		ended       string
	}{
		{"renewed, then lost", aHold("a", ev("acquired", 10, 110), ev("renewed", 50, 150), lostEv("backend-unavailable", 140, 150)), 10, 140, "lost"},
		{"silent: its own clock", aHold("a", ev("acquired", 10, 110), ev("renewed", 50, 150)), 10, 150, "expiry"},
		{"a renewal after the end does not revive it", aHold("a", ev("acquired", 10, 110), ev("renewed", 120, 220)), 10, 110, "expiry"},
		{"a renewal never shortens", aHold("a", ev("acquired", 10, 110), ev("renewed", 20, 90)), 10, 110, "expiry"},
		{"let go", func() Hold {
			h := aHold("a", ev("acquired", 10, 110), ev("released", 70, 110))
			h.LetGo = 60 * ms
			return h
		}(), 10, 60, "let-go"},
		{"broken", func() Hold {
			h := aHold("a", ev("acquired", 10, 110))
			h.Closed, h.Broken = 40*ms, true
			return h
		}(), 10, 40, "broken"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			from, until, ended, ok := c.h.View()
			assert.True(t, ok)
			assert.Equal(t, c.from*ms, from)
			assert.Equal(t, c.until*ms, until)
			assert.Equal(t, c.ended, ended)
		})
	}
	_, _, _, ok := aHold("late", ev("acquired", 120, 110)).View()
	assert.False(t, ok, "an acquired event that arrived after its end holds nothing")
	_, _, _, ok = Hold{Key: "k", Token: "x", Status: 409}.View()
	assert.False(t, ok, "a refused hold holds nothing")
}

func TestCheckHolds(t *testing.T) {
	cases := []struct {
		name  string
		holds []Hold
		ops   []Op
		want  map[string]int
	}{
		{"lost in time, then a successor", []Hold{
			aHold("a", ev("acquired", 10, 110), ev("renewed", 50, 150), lostEv("backend-unavailable", 130, 150)),
			aHold("b", ev("acquired", 155, 255)),
		}, nil, map[string]int{}},
		{"lost at the end is late", []Hold{
			aHold("a", ev("acquired", 10, 110), ev("renewed", 50, 150), lostEv("backend-unavailable", 150, 150)),
		}, nil, map[string]int{"lost-late": 1}},
		{"lost after a stopped gateway came back is late, though the holder had stopped", []Hold{
			aHold("a", ev("acquired", 10, 110), lostEv("backend-unavailable", 400, 110)),
			aHold("b", ev("acquired", 120, 220)),
		}, nil, map[string]int{"lost-late": 1}},
		{"lost judged against the last renewal heard, not a later one", []Hold{
			aHold("a", ev("acquired", 10, 110), ev("renewed", 50, 150), lostEv("expired", 160, 190)),
		}, nil, map[string]int{"lost-late": 1}},
		{"two holders", []Hold{
			aHold("a", ev("acquired", 10, 110), ev("renewed", 50, 150)),
			aHold("b", ev("acquired", 140, 240)),
		}, nil, map[string]int{"overlap": 1}},
		{"a successor after a silent end, while a late renewal came", []Hold{
			aHold("a", ev("acquired", 10, 110), ev("renewed", 300, 350)),
			aHold("b", ev("acquired", 120, 220)),
		}, nil, map[string]int{}},
		{"a successor after the holder let go, before the stream said released", []Hold{
			func() Hold {
				h := aHold("a", ev("acquired", 10, 110), ev("released", 70, 110))
				h.LetGo = 60 * ms
				return h
			}(),
			aHold("b", ev("acquired", 65, 165)),
		}, nil, map[string]int{}},
		{"a plain lease granted while a hold holds", []Hold{
			aHold("a", ev("acquired", 10, 110)),
		}, []Op{grant(1, "p", 40, 50, 8, 150)}, map[string]int{"overlap": 1}},
		{"two plain leases that overlap are CheckOverlap's, but do not hide a hold", []Hold{
			aHold("a", ev("acquired", 10, 110)),
		}, []Op{grant(1, "p", 0, 5, 8, 200), grant(2, "q", 40, 50, 9, 150)}, map[string]int{"overlap": 2}},
		{"plain leases on a key no hold held are not judged here", nil,
			[]Op{grant(1, "p", 0, 5, 8, 200), grant(2, "q", 40, 50, 9, 150)}, map[string]int{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, byChecker(CheckHolds(c.holds, c.ops)))
		})
	}
}

func TestHoldStats(t *testing.T) {
	broken := aHold("c", ev("acquired", 10, 110))
	broken.Closed, broken.Broken = 300*ms, true
	st := StatsOf([]Hold{
		aHold("a", ev("acquired", 10, 110), ev("renewed", 50, 150), lostEv("backend-unavailable", 130, 150)),
		aHold("b", ev("acquired", 10, 110), lostEv("backend-unavailable", 400, 110)),
		broken,
		{Key: "k", Token: "d", Status: 409},
	})
	assert.Equal(t, 4, st.Asked)
	assert.Equal(t, 3, st.Granted)
	assert.Equal(t, map[string]int{"lost (backend-unavailable)": 1, "expiry": 2}, st.Ended)
	assert.Equal(t, map[string]int{"lost": 1, "broken": 1}, st.AfterExpiry)
	assert.Equal(t, 2, st.Lost)
	assert.Equal(t, -290*time.Millisecond, st.LostMargin, "the latest lost, measured against its end")
}
