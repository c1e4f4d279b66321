package ratelimit

// Followers is how many requests of user are waiting on its store check in
// progress, besides the one that started it.
func Followers(l *Limiter, user string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f := l.flights[user]; f != nil {
		return f.followers
	}
	return 0
}
