package server

import (
	"errors"
	"math"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMemoryPolicy: the memory limit the gateway chooses, as docs/operations.md's
// Memory and bounds says: GOMEMLIMIT as Go reads it, else LOCKGW_MEMORY_LIMIT,
// else 90% of the cgroup's limit, else 90% of the machine's memory; GOGC
// 400 unless GOGC is set.
func TestMemoryPolicy(t *testing.T) {
	const gib = 1 << 30
	limit := func(n uint64) func() (uint64, error) { return func() (uint64, error) { return n, nil } }
	none := func() (uint64, error) { return 0, memlimit.ErrNoLimit }
	broken := func() (uint64, error) { return 0, errors.New("no /proc") }
	for _, tc := range []struct {
		name      string
		cgroup    func() (uint64, error)
		system    func() (uint64, error)
		setting   string
		env       map[string]string
		want      int64
		set       bool // the gateway sets the limit (not the runtime from GOMEMLIMIT)
		gcPercent int
		source    string
	}{
		{"cgroup", limit(2 * gib), limit(64 * gib), "auto", nil, 2 * gib * 9 / 10, true, 400, "90% of the cgroup's 2.0 GiB"},
		{"cgroup unlimited", none, limit(16 * gib), "auto", nil, 16 * gib * 9 / 10, true, 400, "90% of the machine's 16.0 GiB; no cgroup limit"},
		{"cgroup unreadable", broken, limit(16 * gib), "auto", nil, 16 * gib * 9 / 10, true, 400, "90% of the machine's 16.0 GiB; no cgroup limit"},
		{"cgroup of max int", limit(math.MaxUint64), limit(16 * gib), "auto", nil, 16 * gib * 9 / 10, true, 400, "90% of the machine's 16.0 GiB; no cgroup limit"},
		{"nothing known", none, none, "auto", nil, math.MaxInt64, true, 400, "none: no cgroup limit, machine memory unknown"},
		{"setting", limit(2 * gib), limit(64 * gib), "512MiB", nil, 512 << 20, true, 400, "setting"},
		{"setting off", limit(2 * gib), limit(64 * gib), "off", nil, math.MaxInt64, true, 400, "setting"},
		{"GOMEMLIMIT", limit(2 * gib), limit(64 * gib), "auto", map[string]string{"GOMEMLIMIT": "3GiB"}, 3 * gib, false, 400, "GOMEMLIMIT"},
		{"GOGC", limit(2 * gib), limit(64 * gib), "auto", map[string]string{"GOGC": "100"}, 2 * gib * 9 / 10, true, 0, "90% of the cgroup's 2.0 GiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := memorySources{cgroup: tc.cgroup, system: tc.system}
			p, err := s.choose(tc.setting, func(k string) string { return tc.env[k] })
			require.NoError(t, err)
			assert.Equal(t, tc.want, p.limit)
			assert.Equal(t, tc.set, p.setLimit)
			assert.Equal(t, tc.gcPercent, p.gcPercent)
			assert.Equal(t, tc.source, p.source)
		})
	}

	s := memorySources{cgroup: limit(gib), system: limit(gib)}
	_, err := s.choose("1GiB", func(k string) string { return map[string]string{"GOMEMLIMIT": "2GiB"}[k] })
	assert.ErrorContains(t, err, "set one", "GOMEMLIMIT and a setting contradict each other")
	_, err = s.choose("auto", func(k string) string { return map[string]string{"GOMEMLIMIT": "lots"}[k] })
	assert.Error(t, err)
}

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]int64{
		"1073741824": 1 << 30, "512MiB": 512 << 20, "2GiB": 2 << 30, "64KiB": 64 << 10, "1TiB": 1 << 40, "100B": 100, "off": math.MaxInt64,
	} {
		got, err := parseByteSize(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "0", "-1MiB", "1.5GiB", "1GB", "1 GiB", "auto", "9999999TiB"} {
		_, err := parseByteSize(in)
		assert.Error(t, err, in)
	}
}

// TestResolveBounds: "auto" bounds follow the memory limit within their
// clamps; bounds set by hand that could hold more than half the limit stop
// start-up.
func TestResolveBounds(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name                string
		limit               int64
		conns, waiting      int // set by hand; 0 is auto
		wantConns, wantWait int
		err                 bool
	}{
		{"big machine", 21 << 30, 0, 0, maxConns, maxWaiting, false},
		{"no limit", math.MaxInt64, 0, 0, maxConns, maxWaiting, false},
		{"256 MiB container", 230 * mib, 0, 0, 3680, 920, false},
		{"tiny", 2 * mib, 0, 0, minConns, minWaiting, false},
		{"by hand, fits", 230 * mib, 2000, 500, 2000, 500, false},
		{"by hand, too many connections", 230 * mib, 10000, 0, 10000, 920, true},
		{"by hand, no limit", math.MaxInt64, 100000, 50000, 100000, 50000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := resolveBounds(Config{MaxConns: tc.conns, MaxWaiting: tc.waiting}, tc.limit)
			if tc.err {
				assert.ErrorContains(t, err, "more than half the memory limit")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.wantConns, b.maxConns)
			assert.Equal(t, tc.wantWait, b.maxWaiting)
			held := int64(b.maxConns)*connBytes + int64(b.maxWaiting)*waiterExtraBytes
			if tc.conns == 0 && tc.waiting == 0 && tc.limit >= 64*mib {
				assert.LessOrEqual(t, held, tc.limit/2, "auto bounds fit well within the limit")
			}
		})
	}
}

// TestGCPercent: GOGC follows the live heap — 400 while it is small, so the
// collector is not run for nothing; a headroom of 64 MiB above 16 MiB; 100
// from 64 MiB, so the heap stays within twice what is live.
func TestGCPercent(t *testing.T) {
	const mib = 1 << 20
	for live, want := range map[uint64]int{0: 400, 3 * mib: 400, 16 * mib: 400, 32 * mib: 200, 40 * mib: 160, 64 * mib: 100, 1 << 30: 100} {
		assert.Equal(t, want, gcPercent(live), "live %d MiB", live/mib)
	}
}
