package redlock

// AdmissionLimit is the limit on acquire rounds in flight (admit.go).
func (r *Store) AdmissionLimit() float64 {
	r.admit.mu.Lock()
	defer r.admit.mu.Unlock()
	return r.admit.limit
}
