package client_test

import (
	"testing"

	"github.com/lockgateway/lockgateway/internal/testlayer"
)

func TestMain(m *testing.M) { testlayer.Main(m, 8) }
