package client_test

import (
	"flag"
	"os"
	"testing"

	"github.com/lockgateway/lockgateway/internal/testlayer"
)

func TestMain(m *testing.M) {
	flag.Parse()
	testlayer.ParallelWaits(8)
	os.Exit(m.Run())
}
