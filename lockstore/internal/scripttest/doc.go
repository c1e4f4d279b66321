// Package scripttest stages script calls out of their usual order against
// real servers, for the tests of both Redis-based backends
// (lockstore/redis and lockstore/redlock), which run the same scripts
// (lockstore/internal/script) and so must pass the same staged cases.
//
// The invariant they check is rule V2's (docs/safety.md): a release, or a
// forced one, deletes a lease only as it read it, so a delete landing
// late, after the same token was granted, renewed or extended again, finds
// the lease changed and leaves it. BeforeScript wraps a store's script
// client to run a hook before a script's first call; LateRelease
// replays a release's reads, a later request, then the release's deletes.
package scripttest
