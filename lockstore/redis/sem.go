package redis

import (
	"context"
	_ "embed"
	"slices"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/lockgateway/lockgateway/lockstore/internal/wait"
	"github.com/redis/go-redis/v9"
)

var _ lockstore.Semaphores = (*Store)(nil)

// SemAcquire implements Semaphores. With LOCKGW_REDIS_WAIT_REPLICAS a
// grant is answered only once the replicas acknowledged it (semAcquire).
func (s *Store) SemAcquire(ctx context.Context, key string, req lockstore.PermitRequest) (lockstore.Permit, error) {
	if err := lockstore.CheckPermit(key, req); err != nil {
		return lockstore.Permit{}, err
	}
	start := s.now()
	a := script.SemArgs{Digest: script.DigestHex(req.Token), Ttl: req.TTL, Owner: req.Owner, Limit: req.Limit, Publish: s.publish}
	r, err := s.semAcquire(ctx, key, a)
	if err != nil {
		return lockstore.Permit{}, err
	}
	if r.Code == script.SemRefused && req.Wait > 0 {
		return s.semWait(ctx, key, a, req, start)
	}
	return r.Permit(key, req, start)
}

func (s *Store) semAcquire(ctx context.Context, key string, a script.SemArgs) (script.SemResult, error) {
	if s.acks.replicas == 0 {
		return script.SemAcquire(ctx, s.clocked(s.scripts), key, a)
	}
	conn, err := s.conn()
	if err != nil {
		return script.SemResult{}, err
	}
	defer conn.Close()
	r, err := script.SemAcquire(ctx, s.clocked(conn), key, a)
	if err != nil || (r.Code != script.SemNew && r.Code != script.SemRenewed) {
		return r, err
	}
	if err := s.acks.await(ctx, conn); err != nil {
		if r.Code == script.SemNew {
			s.semUnwait(ctx, key, r.Slot, r.Value.Raw)
		}
		return script.SemResult{}, err
	}
	return r, nil
}

// semUnwait takes back a new permit the replicas did not acknowledge, as
// unwait does a lock's, if its slot is still exactly what the grant left
// (sem_unwait.lua: a renewal or extend by the same token since, which may
// have been answered 200, always changes it). A renewal is left as it is,
// for acquireAcked's reason. When the take-back cannot run (the master
// died), the permit is left to its TTL: one place of the key nobody was
// told it holds, never one more holder than the limit.
func (s *Store) semUnwait(ctx context.Context, key string, slot int, value string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.acks.timeout)
	defer cancel()
	_ = script.SemUnwait(ctx, s.clocked(s.client), key, slot, value, s.publish)
}

// semWait queues the caller and takes a permit when it is its turn
// (wait.For, wait.Told): woken by a release, grant or leave that names its
// ticket, by the first permit's expiry (the first waiter sleeps until
// then), or by its gateway's heartbeat when a permit is free for it and
// the notification was lost (sem_room.go). Between those it runs no script
// at all.
func (s *Store) semWait(ctx context.Context, key string, a script.SemArgs, req lockstore.PermitRequest, start time.Time) (lockstore.Permit, error) {
	a.Ticket = script.WaitTicket{Id: s.rooms.ticket(), Heartbeat: waitHeartbeat}
	// Listen before queueing, so a release between the two is not missed.
	wake := make(chan struct{}, 1)
	if err := s.notifier.Listen(ctx, script.SemChannel(key), a.Ticket.Id, wake); err != nil {
		return lockstore.Permit{}, err
	}
	defer s.notifier.Stop(script.SemChannel(key), a.Ticket.Id)
	rm, w := s.enter(key, true, a.Ticket.Id, wake)
	granted := false
	defer func() {
		s.part(rm, w) // first, so the heartbeat does not take the leave for a lost queue
		if !granted {
			s.semLeave(ctx, key, a.Ticket.Id)
		}
	}()
	var p lockstore.Permit
	var err error
	try := func() wait.Try {
		attempt := s.now()
		rm.trying(w)
		r, rerr := s.semAcquire(ctx, key, a)
		rm.tried(w, rerr == nil && r.Code == script.SemRefused, false)
		if rerr != nil {
			p, err = lockstore.Permit{}, rerr
			return wait.Try{Answer: noAnswer(rerr)}
		}
		p, err = r.Permit(key, req, attempt)
		if r.Code != script.SemRefused {
			granted = r.Code == script.SemNew || r.Code == script.SemRenewed
			return wait.Try{Answer: wait.Done}
		}
		return wait.Queued(r.Head, r.Remaining)
	}
	if werr := wait.For(ctx, start.Add(req.Wait), wake, wait.Told, try); werr != nil {
		return lockstore.Permit{}, werr
	}
	return p, err
}

// semLeave takes a waiter out of the queue as leave does (leaveBy); if
// it fails, the heartbeat drops the entry within waitHeartbeat.
func (s *Store) semLeave(req context.Context, key, id string) {
	leaveBy(req, func(ctx context.Context) { _ = script.SemLeave(ctx, s.client, key, id, s.publish) })
}

// SemExtend implements Semaphores.
func (s *Store) SemExtend(ctx context.Context, key, token string, ttl time.Duration) (lockstore.Permit, error) {
	if err := lockstore.CheckExtend(key, token, ttl); err != nil {
		return lockstore.Permit{}, err
	}
	start := s.now()
	var c = s.scripts
	var conn *redis.Conn
	if s.acks.replicas > 0 {
		var err error
		if conn, err = s.conn(); err != nil {
			return lockstore.Permit{}, err
		}
		defer conn.Close()
		c = conn
	}
	v, err := script.SemExtend(ctx, c, key, script.DigestHex(token), ttl, false, s.publish)
	if err == nil && conn != nil {
		err = s.acks.await(ctx, conn)
	}
	if err != nil {
		return lockstore.Permit{}, err
	}
	return v.Permit(key, token, v.Limit, start), nil
}

// SemRelease implements Semaphores.
func (s *Store) SemRelease(ctx context.Context, key, token string) error {
	if err := lockstore.CheckRelease(key, token); err != nil {
		return err
	}
	return script.SemReleaseAsRead(ctx, s.clocked(s.scripts), key, script.DigestHex(token), s.publish, 0)
}

// SemForceRelease implements Forcer: SemRelease of the permit with fence,
// its holder's digest taken from a read in place of the caller's token's.
func (s *Store) SemForceRelease(ctx context.Context, key string, fence int64) (lockstore.Permit, error) {
	if err := lockstore.CheckForce(key, fence, true); err != nil {
		return lockstore.Permit{}, err
	}
	limit, vs, err := script.SemInspect(ctx, s.scripts, key)
	if err != nil {
		return lockstore.Permit{}, err
	}
	i := slices.IndexFunc(vs, func(v script.SemValue) bool { return v.Fence == fence })
	if i < 0 {
		return lockstore.Permit{}, lockstore.ErrNotHeld
	}
	v := vs[i]
	if err := script.SemReleaseAsRead(ctx, s.clocked(s.scripts), key, v.Digest, s.publish, fence); err != nil {
		return lockstore.Permit{}, lockstore.ForcedErr(err)
	}
	return lockstore.Permit{Key: key, Owner: v.Owner, Limit: limit, Fence: v.Fence, Granted: v.Length}, nil
}

// SemInspect implements Semaphores.
func (s *Store) SemInspect(ctx context.Context, key string) (lockstore.SemaphoreState, error) {
	start := s.now()
	limit, vs, err := script.SemInspect(ctx, s.scripts, key)
	if err != nil {
		return lockstore.SemaphoreState{}, err
	}
	st := lockstore.SemaphoreState{Key: key, Limit: limit}
	for _, v := range vs {
		st.Holders = append(st.Holders, v.Found(key, limit, start))
	}
	lockstore.SortHolders(st.Holders)
	return st, nil
}
