package lockstore

import "github.com/lockgateway/lockgateway/lockstore/internal/listing"

// The names Redlock's files (redlock_*.go, list_redlock.go) use for
// pieces exported or moved to lockstore/internal/listing when the memory
// backend left for a package of its own (issue 27). The one-protocol
// change is rewriting those files meanwhile; they take the new names once
// it lands, and this file goes.
var (
	checkAcquire = CheckAcquire
	checkExtend  = CheckExtend
	checkPermit  = CheckPermit
	checkList    = CheckList
	sortHolders  = SortHolders
	newSmallest  = listing.NewSmallest
	page         = listing.Page
)

type smallest = listing.Smallest
