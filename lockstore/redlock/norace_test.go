//go:build !race

package redlock_test

const raceSlowdown = 1
