// Package listing is what the backends' listings (lockstore.Lister,
// lockstore.SemLister) share: no backend keeps an index ordered by key, so
// a page is the few smallest keys of one pass over all of them, and that
// pass holds no more than a page and one key however many it sees.
package listing

import "slices"

// Smallest keeps the n smallest distinct keys it is offered, so a pass
// over any number of keys holds n of them at most. n is small (a page and
// one), so a sorted slice is as quick as a heap.
type Smallest struct {
	n    int
	Keys []string // sorted, distinct
}

// NewSmallest returns an empty Smallest keeping n keys.
func NewSmallest(n int) *Smallest { return &Smallest{n: n, Keys: make([]string, 0, n)} }

// Offer keeps key if it is among the n smallest offered so far.
func (s *Smallest) Offer(key string) {
	if len(s.Keys) == s.n && key >= s.Keys[len(s.Keys)-1] {
		return
	}
	i, found := slices.BinarySearch(s.Keys, key)
	if found {
		return
	}
	if len(s.Keys) == s.n {
		s.Keys = s.Keys[:len(s.Keys)-1]
	}
	s.Keys = slices.Insert(s.Keys, i, key)
}

// Full reports whether s holds n keys: then every key it was not offered,
// or dropped, is above its last.
func (s *Smallest) Full() bool { return len(s.Keys) == s.n }

// Page cuts the sorted candidates (at most limit+1 of them) into the keys
// of a page and its Next: with more than limit, there is a next page,
// which starts after the page's last key.
func Page(candidates []string, limit int) (keys []string, next string) {
	if len(candidates) > limit {
		return candidates[:limit], candidates[limit-1]
	}
	return candidates, ""
}
