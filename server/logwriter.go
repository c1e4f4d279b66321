package server

import (
	"bufio"
	"io"
	"sync"
	"time"
)

// bufferedLog batches log lines into fewer writes: one write(2) per request
// was a measurable share of a request's cost. Lines reach the output within
// flushEvery, and all of them by Close. A line is never split: zerolog
// writes each event with one Write call.
type bufferedLog struct {
	mu   sync.Mutex
	w    *bufio.Writer
	done chan struct{}
	wg   sync.WaitGroup
}

const flushEvery = 100 * time.Millisecond

func newBufferedLog(out io.Writer) *bufferedLog {
	b := &bufferedLog{w: bufio.NewWriterSize(out, 64<<10), done: make(chan struct{})}
	b.wg.Go(func() {
		t := time.NewTicker(flushEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				b.flush()
			case <-b.done:
				return
			}
		}
	})
	return b
}

func (b *bufferedLog) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Write(p)
}

func (b *bufferedLog) flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	_ = b.w.Flush()
}

// Close stops the flusher and writes out what is buffered.
func (b *bufferedLog) Close() error {
	close(b.done)
	b.wg.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Flush()
}
