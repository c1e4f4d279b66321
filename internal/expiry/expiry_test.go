package expiry_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/lockgateway/lockgateway/internal/expiry"
)

func TestQueue(t *testing.T) {
	var q expiry.Queue[string]
	now := time.Now()
	q.Add("c", now.Add(3*time.Second))
	a := q.Add("a", now.Add(time.Second))
	b := q.Add("b", now.Add(2*time.Second))
	q.Add("d", now.Add(4*time.Second))

	q.Move(a, now.Add(5*time.Second)) // extended past the others
	q.Remove(b)                       // released
	at, ok := q.Earliest()
	assert.True(t, ok)
	assert.Equal(t, now.Add(3*time.Second), at)

	var dropped []string
	q.PopExpired(now.Add(3*time.Second), func(k string) { dropped = append(dropped, k) })
	assert.Equal(t, []string{"c"}, dropped, "a deadline equal to now has passed")
	assert.Equal(t, 2, q.Len())

	q.PopExpired(now.Add(time.Hour), func(k string) { dropped = append(dropped, k) })
	assert.Equal(t, []string{"c", "d", "a"}, dropped, "earliest first")
	assert.Zero(t, q.Len())
	_, ok = q.Earliest()
	assert.False(t, ok, "an empty queue has no earliest deadline")
}
