package script

import "strings"

// Sources are the lock and permit scripts as the gateway sends them, by
// the name of their file: deadline.lua and sem_common.lua in front where
// they belong. The simulators and the differential test run these, so
// what a script is made of is written here once.
var Sources = map[string]string{
	"acquire.lua":      DeadlineLua + AcquireLua,
	"extend.lua":       ExtendLua,
	"release.lua":      DeadlineLua + ReleaseLua,
	"inspect.lua":      InspectLua,
	"clock.lua":        ClockLua,
	"confirm.lua":      DeadlineLua + ConfirmLua,
	"discard.lua":      DiscardLua,
	"unwait.lua":       DeadlineLua + unwaitLua,
	"nodeset_mark.lua": NodesetMarkLua,
	"sem_acquire.lua":  DeadlineLua + SemCommonLua + SemAcquireLua,
	"sem_extend.lua":   SemCommonLua + SemExtendLua,
	"sem_release.lua":  DeadlineLua + SemCommonLua + SemReleaseLua,
	"sem_read.lua":     SemCommonLua + SemReadLua,
	"sem_inspect.lua":  SemCommonLua + SemInspectLua,
	"sem_confirm.lua":  DeadlineLua + SemCommonLua + SemConfirmLua,
	"sem_discard.lua":  SemCommonLua + SemDiscardLua,
	"sem_unwait.lua":   DeadlineLua + SemCommonLua + semUnwaitLua,
	"uncount.lua":      DeadlineLua + uncountLua,
}

// Deadlined says whether the script of that file name carries rule D's
// deadline (deadline.lua in front; the caller goes through Clocked).
func Deadlined(name string) bool {
	return strings.HasPrefix(Sources[name], DeadlineLua)
}
