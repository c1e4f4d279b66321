//go:build !race

package lockstore_test

const raceSlowdown = 1
