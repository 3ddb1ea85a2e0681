package consumer

import "github.com/onceq/onceq"

// KitConfig configures a Task built by NewKitTask.
type KitConfig struct {
	// Topic, Partition and Offset locate the record the task pretends to
	// come from.
	Topic     string
	Partition int32
	Offset    int64
	// State holds the partition's committed values, as the checkpoint
	// would. NewKitTask never writes to it.
	State map[string][]byte
	// MaxMessageBytes bounds what Emit accepts, as the worker's
	// MaxMessageBytes does; zero or less means
	// onceq.DefaultMaxMessageBytes.
	MaxMessageBytes int
	// OnWrite, when not nil, is told of each State write in order: a nil
	// value is a Delete (Set of nil stores an empty value).
	OnWrite func(key, value []byte)
}

// NewKitTask builds a Task that runs without a Worker, for handler tests
// and test kits such as consumertest. Its State reads the task's own
// writes over cfg.State, and Emit validates and derives IDs as the
// worker's does; KitEmitted returns what it emitted. Workers never call
// it.
func NewKitTask(task onceq.Task, cfg KitConfig) *Task {
	maxBytes := cfg.MaxMessageBytes
	if maxBytes <= 0 {
		maxBytes = onceq.DefaultMaxMessageBytes
	}
	return &Task{
		Task: task, Topic: cfg.Topic, Partition: cfg.Partition, Offset: cfg.Offset,
		kitMaxBytes: maxBytes,
		state:       State{kitBase: cfg.State, kitOnWrite: cfg.OnWrite},
	}
}

// KitEmitted returns the tasks t emitted so far, in order, with the IDs
// Emit derived; for tests and kits.
func KitEmitted(t *Task) []onceq.Task {
	out := make([]onceq.Task, len(t.emits))
	for i := range t.emits {
		out[i] = t.emits[i].Clone()
	}
	return out
}
