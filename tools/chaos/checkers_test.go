package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each checker is shown both ways on hand-made histories: it passes what is
// correct (including the awkward but legal cases faults produce) and
// catches what is wrong. Times are in ms from an arbitrary origin.

const ms = int64(time.Millisecond)

func grant(client int, token string, call, ret, fence, expires int64) Op {
	return Op{Client: client, Key: "k", Kind: Acquire, Token: token, TTL: 100 * time.Millisecond,
		Call: call * ms, Return: ret * ms, Result: Granted, Status: 201, Fence: fence, Expires: expires * ms}
}

func extend(client int, token string, call, ret int64, res Result, expires int64) Op {
	op := Op{Client: client, Key: "k", Kind: Extend, Token: token, TTL: 100 * time.Millisecond,
		Call: call * ms, Return: ret * ms, Result: res}
	if res == Extended {
		op.Fence, op.Expires = 1, expires*ms
	}
	return op
}

func release(client int, token string, call, ret int64, res Result) Op {
	return Op{Client: client, Key: "k", Kind: Release, Token: token, Call: call * ms, Return: ret * ms, Result: res}
}

func lost(client int, token string, call, ret int64) Op {
	return Op{Client: client, Key: "k", Kind: Acquire, Token: token, TTL: 100 * time.Millisecond,
		Call: call * ms, Return: ret * ms, Result: Unknown}
}

func renewed(client int, token string, call, ret, fence, expires int64) Op {
	op := grant(client, token, call, ret, fence, expires)
	op.Result, op.Status = Renewed, 200
	return op
}

func held(client int, token string, call, ret int64) Op {
	return Op{Client: client, Key: "k", Kind: Acquire, Token: token, TTL: 100 * time.Millisecond,
		Call: call * ms, Return: ret * ms, Result: Held, Status: 409}
}

func checkers(ops []Op) map[string]int {
	v := Verdict{Ops: ops}
	v.Violations = append(v.Violations, CheckOverlap(ops)...)
	lin, inc := CheckLinearizable(ops, 10*time.Second, "", "")
	if len(inc) > 0 {
		panic("inconclusive")
	}
	v.Violations = append(v.Violations, lin...)
	v.Violations = append(v.Violations, CheckFences(ops)...)
	return v.ByChecker()
}

func TestCheckersPassCorrectHistories(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []Op
	}{
		{"one after another", []Op{
			grant(0, "A", 0, 2, 10, 100), release(0, "A", 50, 52, Released),
			grant(1, "B", 40, 53, 11, 150), release(1, "B", 60, 61, Released),
		}},
		{"next holder after expiry, previous release too late", []Op{
			grant(0, "A", 0, 2, 10, 100), held(1, "B", 50, 51),
			grant(1, "B", 60, 101, 11, 200), // granted just after A's expires_at
			release(0, "A", 120, 121, Mismatch),
		}},
		{"granted within A's maybe window (its lease really ran out)", []Op{
			grant(0, "A", 0, 2, 10, 100), grant(1, "B", 95, 101, 11, 200),
		}},
		{"a grant that arrived after its own expiry holds nothing", []Op{
			grant(0, "A", 0, 150, 10, 100), grant(1, "B", 90, 120, 11, 220),
			release(0, "A", 151, 152, Mismatch),
		}},
		{"concurrent acquires, slow answer", []Op{
			grant(0, "A", 0, 100, 10, 50), grant(1, "B", 10, 60, 11, 160),
		}},
		{"extension keeps the lease", []Op{
			grant(0, "A", 0, 2, 10, 100), extend(0, "A", 80, 82, Extended, 180),
			grant(1, "B", 150, 181, 11, 300),
		}},
		{"unknown extension, then a release that still finds it", []Op{
			grant(0, "A", 0, 2, 10, 100), extend(0, "A", 80, 90, Unknown, 0),
			release(0, "A", 400, 401, Released),
		}},
		{"unknown release, next holder before A's expiry", []Op{
			grant(0, "A", 0, 2, 10, 100), release(0, "A", 20, 30, Unknown),
			grant(1, "B", 40, 45, 11, 150),
		}},
		{"not held after expiry", []Op{
			grant(0, "A", 0, 2, 10, 100), extend(0, "A", 101, 103, NotHeld, 0),
		}},
		{"a retry finds the lost attempt's lease", []Op{
			grant(0, "A", 0, 2, 10, 100), release(0, "A", 20, 22, Released),
			lost(1, "B", 30, 60), renewed(1, "B", 61, 63, 11, 160), release(1, "B", 70, 71, Released),
		}},
		{"a retry after the lost attempt's lease ran out", []Op{
			lost(1, "B", 0, 60), grant(1, "B", 200, 202, 11, 300),
		}},
		{"twins: the same acquire twice at once, one granted, one renewed", []Op{
			grant(0, "A", 0, 3, 10, 100), renewed(0, "A", 0, 5, 10, 102), release(0, "A", 50, 52, Released),
			grant(1, "B", 51, 53, 11, 150),
		}},
		{"twins: one granted, one lost that renewed the lease late", []Op{
			grant(0, "A", 0, 3, 10, 100), lost(0, "A", 0, 200), release(0, "A", 250, 252, Released),
			grant(1, "B", 253, 255, 11, 350),
		}},
		{"twins: both granted (201), the same holder", []Op{
			grant(0, "A", 0, 3, 10, 100), grant(0, "A", 0, 5, 11, 102), release(0, "A", 50, 52, Released),
			grant(1, "B", 51, 53, 12, 150),
		}},
		{"released, then taken again with the same token", []Op{
			grant(0, "A", 0, 2, 10, 100), release(0, "A", 20, 22, Released),
			grant(0, "A", 30, 32, 11, 130), release(0, "A", 60, 62, Released),
			grant(1, "B", 61, 63, 12, 160),
		}},
		{"lost extension, then someone else", []Op{
			grant(0, "A", 0, 2, 10, 100), extend(0, "A", 120, 122, Mismatch, 0),
			grant(1, "B", 105, 121, 11, 220),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Empty(t, checkers(tc.ops))
		})
	}
}

func TestCheckersCatchViolations(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []Op
		want map[string]int
	}{
		{"second holder while the first surely holds", []Op{
			grant(0, "A", 0, 2, 10, 100), grant(1, "B", 10, 20, 11, 200),
		}, map[string]int{"overlap": 1, "linearizability": 1}},
		{"second holder after the first's extension", []Op{
			grant(0, "A", 0, 2, 10, 100), extend(0, "A", 80, 82, Extended, 180),
			grant(1, "B", 105, 110, 11, 300),
		}, map[string]int{"overlap": 1, "linearizability": 1}},
		{"fence goes backwards", []Op{
			grant(0, "A", 0, 2, 10, 100), release(0, "A", 50, 52, Released),
			grant(1, "B", 60, 62, 9, 150),
		}, map[string]int{"fences": 1, "linearizability": 1}},
		{"fence granted twice", []Op{
			grant(0, "A", 0, 2, 10, 100), release(0, "A", 50, 52, Released),
			grant(1, "B", 60, 62, 10, 150),
		}, map[string]int{"fences": 2, "linearizability": 1}},
		{"a retry renewed while another surely holds", []Op{
			lost(1, "B", 0, 10), grant(0, "A", 20, 22, 10, 100), renewed(1, "B", 30, 32, 11, 130),
		}, map[string]int{"overlap": 1, "linearizability": 1}},
		{"twins both granted, then a lower fence", []Op{
			grant(0, "A", 0, 3, 10, 100), grant(0, "A", 0, 5, 12, 102), release(0, "A", 50, 52, Released),
			grant(1, "B", 60, 62, 11, 150),
		}, map[string]int{"fences": 1, "linearizability": 1}},
		{"a second holder while a same-token re-acquire surely holds", []Op{
			grant(0, "A", 0, 2, 10, 100), release(0, "A", 20, 22, Released),
			grant(0, "A", 30, 32, 11, 130), grant(1, "B", 60, 62, 12, 160),
		}, map[string]int{"overlap": 1, "linearizability": 1}},
		{"extension of a lease that had surely run out", []Op{
			grant(0, "A", 0, 2, 10, 100), extend(0, "A", 300, 301, Extended, 400),
		}, map[string]int{"linearizability": 1}},
		{"not held while surely held", []Op{
			grant(0, "A", 0, 2, 10, 100), release(0, "A", 50, 51, NotHeld),
		}, map[string]int{"linearizability": 1}},
		{"released by a token that does not hold it", []Op{
			grant(0, "A", 0, 2, 10, 100), release(1, "B", 50, 51, Released),
		}, map[string]int{"linearizability": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, checkers(tc.ops))
		})
	}
}

func TestOverlapThreeTokens(t *testing.T) {
	ops := []Op{
		grant(0, "A", 0, 1, 10, 100),
		grant(1, "B", 0, 10, 11, 20), // inside A's
		grant(0, "A", 5, 12, 10, 130),
		grant(2, "C", 0, 120, 12, 200), // inside A's second stretch
		grant(3, "D", 0, 210, 13, 300),
	}
	v := CheckOverlap(ops)
	require.Len(t, v, 2, "%v", v)
	assert.Contains(t, v[0].Detail, "token A")
	assert.Contains(t, v[1].Detail, "token C")
}

func TestCounter(t *testing.T) {
	// A holder paused past its lease: it read under fence 1, a newer
	// holder (fence 2) read and wrote, then the paused one writes.
	for _, fenced := range []bool{true, false} {
		r := NewRegister(fenced)
		a, _ := r.Read(1)
		b, ok := r.Read(2)
		require.True(t, ok)
		require.True(t, r.Write(2, b+1))
		accepted := r.Write(1, a+1)
		_, staleRead := r.Read(1)
		if fenced {
			assert.False(t, accepted, "the stale write is refused")
			assert.False(t, staleRead, "so is a stale read")
			assert.Empty(t, CheckCounter("k", r))
		} else {
			assert.True(t, accepted)
			v := CheckCounter("k", r)
			require.Len(t, v, 1)
			assert.Contains(t, v[0].Detail, "2 increments acknowledged but the counter is 1")
		}
	}
}

func TestState(t *testing.T) {
	n := StartNode(t, "")
	c, ctx := n.Client(), context.Background()
	s := NewState(time.Second)
	require.NoError(t, c.Set(ctx, "lockgw:{fine}:lock", "x", 500*time.Millisecond).Err())
	require.NoError(t, c.Set(ctx, "lockgw:{fine}:fence", "1", 2*time.Second).Err())
	require.NoError(t, c.Set(ctx, "unrelated", "x", 0).Err())
	s.Sample(ctx, n.Addr(), c)
	assert.Empty(t, s.Violations())

	require.NoError(t, c.Set(ctx, "lockgw:{forever}:lock", "x", 0).Err())
	require.NoError(t, c.Set(ctx, "lockgw:{long}:lock", "x", time.Minute).Err())
	// A counter kept long after its lease (it used to be a day).
	require.NoError(t, c.Set(ctx, "lockgw:{stale}:fence", "1", time.Hour).Err())
	s.Sample(ctx, n.Addr(), c)
	s.Drained(ctx, n.Addr(), c)
	found := map[string]string{}
	for _, v := range s.Violations() {
		found[v.Key] = v.Detail
	}
	require.Len(t, found, 4, "%v", found)
	assert.Contains(t, found["lockgw:{stale}:fence"], "above the 3s allowed")
	assert.Contains(t, found["lockgw:{forever}:lock"], "has no TTL")
	assert.Contains(t, found["lockgw:{long}:lock"], "above the 1s allowed")
	assert.Contains(t, found["lockgw:{fine}:lock"], "left after the maximum TTL")
}

func TestJumpKeys(t *testing.T) {
	n := StartNode(t, "")
	c, ctx := n.Client(), context.Background()
	require.NoError(t, c.Set(ctx, "lockgw:{a}:lock", "x", 500*time.Millisecond).Err())
	require.NoError(t, c.Set(ctx, "lockgw:{b}:lock", "x", 5*time.Second).Err())
	require.NoError(t, JumpKeys(ctx, c, "lockgw:*", time.Second))
	assert.Zero(t, c.Exists(ctx, "lockgw:{a}:lock").Val())
	ttl := c.PTTL(ctx, "lockgw:{b}:lock").Val()
	assert.Greater(t, ttl, 3*time.Second)
	assert.LessOrEqual(t, ttl, 4*time.Second)
}
