package broker

import "context"

// CountBrokers is what an Admin counts of the cluster's brokers before it
// checks the replication of a topic it creates, kept for later topics.
func CountBrokers(ctx context.Context, a *Admin) (int, error) { return a.brokerCount(ctx) }
