package script

import (
	_ "embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/confirm.lua
	ConfirmLua    string
	ConfirmScript = redis.NewScript(DeadlineLua + ConfirmLua)

	//go:embed lua/discard.lua
	DiscardLua    string
	DiscardScript = redis.NewScript(DiscardLua)
)

// makerOf is the round that made a Redlock value, from its field "~<id>"
// (an older gateway's "~<id1>.<id2>…" was made by id1); none ("") for a
// pinned "~!<id>" of an older gateway, which a round of this one never
// confirms.
func MakerOf(field string) string {
	if strings.HasPrefix(field, "~!") {
		return ""
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(field, "~"), ".")
	return id
}
