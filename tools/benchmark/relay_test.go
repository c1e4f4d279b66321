package main

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRelayCountsRoundTrips: requests pipelined in one write are one
// round trip, a request read in parts is one, each later request after
// its answers another, on every connection; the bytes pass unchanged both
// ways.
func TestRelayCountsRoundTrips(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() { // answers each line with "+<line>"
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := c.Write([]byte("+" + sc.Text() + "\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	r, err := newRelay(ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, r.close()) })

	exchange := func(c net.Conn, br *bufio.Reader, lines ...string) {
		t.Helper()
		var req []byte
		for _, l := range lines {
			req = append(req, l+"\n"...)
		}
		_, err := c.Write(req) // one write: a pipeline
		require.NoError(t, err)
		for _, l := range lines {
			got, err := br.ReadString('\n')
			require.NoError(t, err)
			assert.Equal(t, "+"+l+"\n", got)
		}
	}
	a, err := net.Dial("tcp", r.addr())
	require.NoError(t, err)
	defer a.Close()
	ar := bufio.NewReader(a)
	exchange(a, ar, "get", "set", "del")
	assert.EqualValues(t, 1, r.roundTrips.Load(), "a pipeline is one round trip")
	exchange(a, ar, "ping")
	assert.EqualValues(t, 2, r.roundTrips.Load())
	// A request the relay reads in two parts, no answer between them.
	_, err = a.Write([]byte("ec"))
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond) // the relay reads and passes the first part
	_, err = a.Write([]byte("ho\n"))
	require.NoError(t, err)
	got, err := ar.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "+echo\n", got)
	assert.EqualValues(t, 3, r.roundTrips.Load(), "one request, however many reads")

	b, err := net.Dial("tcp", r.addr())
	require.NoError(t, err)
	defer b.Close()
	exchange(b, bufio.NewReader(b), "ping")
	assert.EqualValues(t, 4, r.roundTrips.Load(), "each connection's")
}
