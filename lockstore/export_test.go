package lockstore

// ClusterSlot is clusterSlot for the external tests.
var ClusterSlot = clusterSlot
