package memory_test

import (
	"testing"

	"github.com/lockgateway/lockgateway/lockstore/lockstoretest"
	"github.com/lockgateway/lockgateway/lockstore/memory"
)

func TestMemoryForce(t *testing.T) {
	s := memory.New()
	lockstoretest.RunForce(t, func(*testing.T) lockstoretest.Forcing { return s })
}
