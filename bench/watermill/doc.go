// Package watermill measures onceq's exactly-once worker against its
// peers, side by side in one run: Watermill's Kafka subscriber
// (github.com/ThreeDotsLabs/watermill-kafka, on Sarama), at-least-once and
// acknowledging only, over the same records on the same broker; and asynq
// (github.com/hibiken/asynq) on a Redis server of its own, which needs
// redis-server on the PATH. go test -bench . -benchtime 3x in this
// directory, or make bench-watermill.
//
// It is a module of its own so that onceq depends on none of them; it has
// no code but its benchmarks.
package watermill
