// Package watermill measures onceq's exactly-once worker against
// Watermill's Kafka subscriber (github.com/ThreeDotsLabs/watermill-kafka,
// on Sarama), at-least-once and acknowledging only, over the same records
// on the same broker: go test -bench . -benchtime 2x in this directory.
//
// It is a module of its own so that onceq depends on neither Watermill nor
// Sarama; it has no code but its benchmark.
package watermill
