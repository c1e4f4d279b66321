package handlers

// The bodies of PUT and PATCH /locks/{key}. Their validate tags are the
// rules; inRange only spares the validator (reflection, a good part of a
// request's decoding) the bodies it would certainly pass.
type (
	acquireBody struct {
		TTLms  *int64  `json:"ttl_ms" validate:"omitnil,gte=10,maxttl"`
		WaitMs *int64  `json:"wait_ms" validate:"omitnil,gte=0,maxwait"`
		Owner  *string `json:"owner" validate:"omitnil,max=128,printable"`
	}
	extendBody struct {
		TTLms *int64 `json:"ttl_ms" validate:"omitnil,gte=10,maxttl"`
	}
)

// inRange is a body that can tell, cheaply, that the validator would pass
// it: true only when it certainly would. False decides nothing: the
// validator then judges, and words any refusal. TestInRangeAsValidator
// holds each to its tags.
type inRange interface {
	inRange(l Limits) bool
}

func (b *acquireBody) inRange(l Limits) bool {
	return ttlInRange(b.TTLms, l) &&
		(b.WaitMs == nil || 0 <= *b.WaitMs && *b.WaitMs <= l.MaxWait.Milliseconds()) &&
		(b.Owner == nil || plainOwner(*b.Owner))
}

func (b *extendBody) inRange(l Limits) bool { return ttlInRange(b.TTLms, l) }

func ttlInRange(ttl *int64, l Limits) bool {
	return ttl == nil || 10 <= *ttl && *ttl <= l.MaxTTL.Milliseconds()
}

// plainOwner: at most 128 bytes (so at most 128 characters), each printable
// ASCII. Any other owner may still be valid; the validator says.
func plainOwner(s string) bool {
	if len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
