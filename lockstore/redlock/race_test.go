//go:build race

package redlock_test

// The race detector slows a program down several times: tests whose
// subject is not speed stretch their time budgets by this much.
const raceSlowdown = 4
