package redis

import (
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
)

// ClusterSlot is clusterSlot for the external tests.
var ClusterSlot = script.ClusterSlot
