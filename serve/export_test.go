package serve

// SetMaxLaneIndex sets how many records of its lane's backlog a server
// keeps, for the servers a test starts after, until restore.
func SetMaxLaneIndex(n int) (restore func()) {
	old := maxLaneIndex
	maxLaneIndex = n
	return func() { maxLaneIndex = old }
}
