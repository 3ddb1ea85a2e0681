package embedded

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/broker"
)

// The embedded broker's guards. kfake takes any topic a client asks for: a
// name of any length and any bytes, any number of partitions, any configs.
// A name it cannot store as a partition directory (<topic>-<partition>, at
// most 255 bytes) broke the whole data dir on the next start ("file name
// too long"), and 999,999,999 partitions took 22 GB before the process was
// killed. So the broker checks every request that makes topics or
// partitions or sets topic configs, as a Kafka broker does, and answers
// a bad one with Kafka's error code and a message naming the limit:
//
//   - CreateTopics: INVALID_TOPIC_EXCEPTION for a name Kafka refuses
//     (longer than broker.MaxTopicLen, or bytes other than letters, digits, '.',
//     '_' and '-'), INVALID_PARTITIONS for more than broker.MaxPartitions,
//     INVALID_CONFIG for a config the embedded broker does not act on or a
//     malformed value.
//   - CreatePartitions: INVALID_PARTITIONS above broker.MaxPartitions.
//   - AlterConfigs, IncrementalAlterConfigs on a topic: INVALID_CONFIG.
//   - Metadata that would auto-create a topic with a bad name: the topic is
//     not created (UNKNOWN_TOPIC_OR_PARTITION).
//
// A request that creates several topics (or partitions, or configs) is
// answered whole when one of them is refused: the others are refused with
// INVALID_REQUEST, naming the one that was bad. kfake's control hooks can
// answer a request or pass it on, not both.
//
// With a data dir, b refuses partitions past the process's file limit
// (fdBudget).
func installGuards(c *kfake.Cluster, b *fdBudget) {
	guard := func(key kmsg.Key, fn func(kmsg.Request) kmsg.Response) {
		c.ControlKey(int16(key), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			if resp := fn(req); resp != nil {
				return resp, nil, true
			}
			return nil, nil, false
		})
	}
	guard(kmsg.CreateTopics, func(req kmsg.Request) kmsg.Response { return guardCreateTopics(req, b) })
	guard(kmsg.CreatePartitions, func(req kmsg.Request) kmsg.Response { return guardCreatePartitions(req, b) })
	guard(kmsg.AlterConfigs, guardAlterConfigs)
	guard(kmsg.IncrementalAlterConfigs, guardIncrementalAlterConfigs)
	guard(kmsg.Metadata, guardMetadata)
}

// refusal is why one entry of a request is refused.
type refusal struct {
	code int16
	msg  string
}

// refusals checks the entries of a request, named by names: check(i)
// returns why entry i is refused, and true if it is. It returns nil when
// none is refused, and otherwise the answer to every entry, as the request
// is refused whole: the bad ones with their own refusal, the rest with
// INVALID_REQUEST naming the first bad one. Entries are told apart by
// name: one that shares a bad entry's name shares its refusal.
func refusals(names []string, check func(i int) (refusal, bool)) []refusal {
	bad := map[string]refusal{}
	first := ""
	for i, n := range names {
		r, ok := check(i)
		if !ok {
			continue
		}
		if len(bad) == 0 {
			first = n
		}
		bad[n] = r
	}
	if len(bad) == 0 {
		return nil
	}
	out := make([]refusal, len(names))
	for i, n := range names {
		if r, ok := bad[n]; ok {
			out[i] = r
			continue
		}
		out[i] = refusal{kerr.InvalidRequest.Code, fmt.Sprintf("not done: %s in the same request was refused (%s); send it alone", first, bad[first].msg)}
	}
	return out
}

func guardCreateTopics(kreq kmsg.Request, b *fdBudget) kmsg.Response {
	req := kreq.(*kmsg.CreateTopicsRequest)
	names := make([]string, len(req.Topics))
	for i, t := range req.Topics {
		names[i] = t.Topic
	}
	refused := refusals(names, func(i int) (refusal, bool) { return checkNewTopic(req.Topics[i]) })
	if refused == nil && !req.ValidateOnly {
		var n int64
		for _, t := range req.Topics {
			n += b.partitionsOf(t)
		}
		refused = refuseAll(len(names), func() (refusal, bool) { return b.refuse(n) })
	}
	if refused == nil {
		return nil
	}
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	for i, r := range refused {
		st := kmsg.NewCreateTopicsResponseTopic()
		st.Topic = names[i]
		st.ErrorCode, st.ErrorMessage = r.code, &r.msg
		st.NumPartitions, st.ReplicationFactor = -1, -1
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// refuseAll answers every one of n entries with check's refusal, if it
// refuses; nil if not.
func refuseAll(n int, check func() (refusal, bool)) []refusal {
	r, ok := check()
	if !ok {
		return nil
	}
	out := make([]refusal, n)
	for i := range out {
		out[i] = r
	}
	return out
}

// checkNewTopic returns why the embedded broker refuses to create t, and
// false if it creates it.
func checkNewTopic(t kmsg.CreateTopicsRequestTopic) (refusal, bool) {
	if p := broker.TopicNameProblem(t.Topic); p != "" {
		return refusal{kerr.InvalidTopicException.Code, fmt.Sprintf("topic %q: %s", t.Topic, p)}, true
	}
	n := int64(t.NumPartitions)
	if len(t.ReplicaAssignment) > 0 {
		n = int64(len(t.ReplicaAssignment))
	}
	if n > broker.MaxPartitions {
		return tooManyPartitions(t.Topic, n), true
	}
	for _, c := range t.Configs {
		if p := embeddedTopicConfigProblem(c.Name, c.Value); p != "" {
			return refusal{kerr.InvalidConfig.Code, fmt.Sprintf("topic %q: %s", t.Topic, p)}, true
		}
	}
	return refusal{}, false
}

// tooManyPartitions refuses n partitions for topic, n over broker.MaxPartitions.
func tooManyPartitions(topic string, n int64) refusal {
	return refusal{kerr.InvalidPartitions.Code, fmt.Sprintf("topic %q: %d partitions is over the embedded broker's limit of %d", topic, n, broker.MaxPartitions)}
}

func guardCreatePartitions(kreq kmsg.Request, b *fdBudget) kmsg.Response {
	req := kreq.(*kmsg.CreatePartitionsRequest)
	names := make([]string, len(req.Topics))
	for i, t := range req.Topics {
		names[i] = t.Topic
	}
	refused := refusals(names, func(i int) (refusal, bool) {
		if t := req.Topics[i]; t.Count > broker.MaxPartitions {
			return tooManyPartitions(t.Topic, int64(t.Count)), true
		}
		return refusal{}, false
	})
	if refused == nil && !req.ValidateOnly {
		// The topics' present counts are not known here: their new ones
		// are counted whole.
		var n int64
		for _, t := range req.Topics {
			n += int64(t.Count)
		}
		refused = refuseAll(len(names), func() (refusal, bool) { return b.refuse(n) })
	}
	if refused == nil {
		return nil
	}
	resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
	for i, r := range refused {
		st := kmsg.NewCreatePartitionsResponseTopic()
		st.Topic = names[i]
		st.ErrorCode, st.ErrorMessage = r.code, &r.msg
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// configResource is a resource of AlterConfigs or IncrementalAlterConfigs:
// its name and type, and the value each of its configs is set to (nil for
// a config being deleted, appended to or subtracted from: its name is
// checked).
type configResource struct {
	name   string
	typ    kmsg.ConfigResourceType
	values map[string]*string
}

// configRefusals checks the configs of the topics among rs; nil if none
// is refused (see refusals).
func configRefusals(rs []configResource) []refusal {
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.name
	}
	return refusals(names, func(i int) (refusal, bool) {
		if rs[i].typ != kmsg.ConfigResourceTypeTopic {
			return refusal{}, false
		}
		for k, v := range rs[i].values {
			if p := embeddedTopicConfigProblem(k, v); p != "" {
				return refusal{kerr.InvalidConfig.Code, fmt.Sprintf("topic %q: %s", rs[i].name, p)}, true
			}
		}
		return refusal{}, false
	})
}

func guardAlterConfigs(kreq kmsg.Request) kmsg.Response {
	req := kreq.(*kmsg.AlterConfigsRequest)
	rs := make([]configResource, len(req.Resources))
	for i, r := range req.Resources {
		rs[i] = configResource{r.ResourceName, r.ResourceType, map[string]*string{}}
		for _, c := range r.Configs {
			rs[i].values[c.Name] = c.Value
		}
	}
	refused := configRefusals(rs)
	if refused == nil {
		return nil
	}
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
	for i, r := range refused {
		rr := kmsg.NewAlterConfigsResponseResource()
		rr.ResourceName, rr.ResourceType = rs[i].name, rs[i].typ
		rr.ErrorCode, rr.ErrorMessage = r.code, &r.msg
		resp.Resources = append(resp.Resources, rr)
	}
	return resp
}

func guardIncrementalAlterConfigs(kreq kmsg.Request) kmsg.Response {
	req := kreq.(*kmsg.IncrementalAlterConfigsRequest)
	rs := make([]configResource, len(req.Resources))
	for i, r := range req.Resources {
		rs[i] = configResource{r.ResourceName, r.ResourceType, map[string]*string{}}
		for _, c := range r.Configs {
			var v *string // a delete, an append or a subtract: the name is checked
			if c.Op == kmsg.IncrementalAlterConfigOpSet {
				v = c.Value
			}
			rs[i].values[c.Name] = v
		}
	}
	refused := configRefusals(rs)
	if refused == nil {
		return nil
	}
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	for i, r := range refused {
		rr := kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceName, rr.ResourceType = rs[i].name, rs[i].typ
		rr.ErrorCode, rr.ErrorMessage = r.code, &r.msg
		resp.Resources = append(resp.Resources, rr)
	}
	return resp
}

// guardMetadata keeps a metadata request from auto-creating a topic with a
// bad name: such a request auto-creates none of its topics (the client
// asks again without the bad one, or fails on it). The request is passed
// on, changed, and never answered here.
func guardMetadata(kreq kmsg.Request) kmsg.Response {
	req := kreq.(*kmsg.MetadataRequest)
	if !req.AllowAutoTopicCreation {
		return nil
	}
	for _, t := range req.Topics {
		if t.Topic != nil && broker.TopicNameProblem(*t.Topic) != "" {
			req.AllowAutoTopicCreation = false
			break
		}
	}
	return nil
}

// dropUnstorableTopics repairs a data dir that an embedded broker without
// the guards poisoned: a topic whose name cannot be a partition directory
// made every later start fail ("file name too long"). Such a topic never
// had a directory, so nothing of it was stored: it is removed from
// topics.json and a warning names it. Everything else in the file is kept
// as it is.
func dropUnstorableTopics(dir string, log *slog.Logger) error {
	path := filepath.Join(dir, "topics.json")
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("broker: reading %s: %w", path, err)
	}
	var doc map[string]json.RawMessage
	var topics []map[string]json.RawMessage
	if json.Unmarshal(raw, &doc) != nil || json.Unmarshal(doc["topics"], &topics) != nil {
		return nil // not ours to judge: kfake reports it
	}
	kept := topics[:0]
	var dropped []string
	for _, t := range topics {
		var name string
		if json.Unmarshal(t["name"], &name) == nil && broker.TopicNameProblem(name) != "" {
			dropped = append(dropped, name)
			continue
		}
		kept = append(kept, t)
	}
	if len(dropped) == 0 {
		return nil
	}
	if doc["topics"], err = json.Marshal(kept); err != nil {
		return err
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	if err := writeFileSync(path, out); err != nil {
		return fmt.Errorf("broker: repairing %s: %w", path, err)
	}
	if log != nil {
		for _, name := range dropped {
			log.Warn("dropped a topic whose name the data dir cannot store (it held no records)",
				"topic", name, "bytes", len(name), "limit", broker.MaxTopicLen, "data_dir", dir)
		}
	}
	return nil
}

// writeFileSync replaces path with data atomically and durably.
func writeFileSync(path string, data []byte) error {
	tmp := path + ".onceq-tmp"
	if err := writeSynced(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, data); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// embeddedTopicConfigs are the topic configs the embedded broker acts on;
// it refuses the others instead of keeping a setting it would ignore.
var embeddedTopicConfigs = []string{
	"cleanup.policy", "compression.type", "delete.retention.ms", "max.message.bytes", "message.timestamp.type",
	"min.insync.replicas", "retention.bytes", "retention.ms", "segment.bytes", "segment.ms",
}

// embeddedTopicConfigProblem is broker.TopicConfigProblem for the embedded broker,
// which takes only the configs it acts on.
func embeddedTopicConfigProblem(k string, v *string) string {
	if !slices.Contains(embeddedTopicConfigs, k) {
		if broker.KnownTopicConfig(k) {
			return fmt.Sprintf("topic config %s is not supported by the embedded broker: it supports %s", k, strings.Join(embeddedTopicConfigs, ", "))
		}
		return fmt.Sprintf("topic config %q is not a topic config the embedded broker knows: use one of %s", k, strings.Join(embeddedTopicConfigs, ", "))
	}
	if v == nil {
		return ""
	}
	return broker.TopicConfigProblem(k, *v)
}
