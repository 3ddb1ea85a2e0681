package console

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/delay"
)

// groupView is a consumer group on the groups page: its partitions of
// the token's queues, with their lag and the member consuming each.
type groupView struct {
	Group, State string
	Members      int
	Partitions   []partitionLag
	Lag          int64 // in tasks, over its partitions
	Exact        bool
}

type partitionLag struct {
	Topic          string
	Partition      int32
	Committed, End int64
	Lag            int64 // in offsets
	// Tasks counts the tasks past the committed offset: the lag without
	// transaction markers and aborted records; Exact is false when it
	// is estimated from the first ones read.
	Tasks  int64
	Exact  bool
	Member string
}

// countLag counts the tasks past each group's committed offsets (all of a
// partition's tasks for a group that committed none), as queue stats do:
// the partitions of every group are read once, up to delay's sampling
// bounds, so that a page of many groups costs what one does.
func countLag(ctx context.Context, conn broker.Conn, groups []groupView) error {
	var spans []*broker.Span
	for i := range groups {
		for j := range groups[i].Partitions {
			pl := &groups[i].Partitions[j]
			spans = append(spans, &broker.Span{Topic: pl.Topic, Partition: pl.Partition, From: pl.End - max(pl.Lag, 0), End: pl.End})
		}
	}
	if err := broker.CountRecords(ctx, conn, spans, delay.StatsSampleOffsets, delay.StatsSampleBytes, lagCountTimeout); err != nil {
		return fmt.Errorf("counting the tasks past the groups' offsets: %w", err)
	}
	k := 0
	for i := range groups {
		g := &groups[i]
		g.Exact = true
		for j := range g.Partitions {
			pl := &g.Partitions[j]
			pl.Tasks, pl.Exact = spans[k].Counted()
			k++
			g.Lag += pl.Tasks
			g.Exact = g.Exact && pl.Exact
		}
	}
	return nil
}

// lagCountTimeout bounds the groups page's reading of the partitions;
// those not read by then are estimated.
const lagCountTimeout = 5 * time.Second

func (c *Console) groupsPage(w http.ResponseWriter, r *http.Request, pg *page) {
	pg.Title = "Groups"
	var groups []groupView
	err := func() error {
		adm, err := broker.NewAdmin(c.conn)
		if err != nil {
			return err
		}
		defer adm.Close()
		listed, err := adm.Kadm().ListGroups(r.Context())
		if err != nil {
			return err
		}
		lags, err := adm.Kadm().Lag(r.Context(), listed.Groups()...)
		if err != nil {
			return err
		}
		for _, gl := range lags.Sorted() {
			g := groupView{Group: gl.Group, State: gl.State, Members: len(gl.Members)}
			for _, topic := range slices.Sorted(maps.Keys(gl.Lag)) {
				if !c.consoleSees(pg.Token, topic) {
					continue
				}
				for _, p := range slices.Sorted(maps.Keys(gl.Lag[topic])) {
					l := gl.Lag[topic][p]
					pl := partitionLag{Topic: topic, Partition: p, Committed: l.Commit.At, End: l.End.Offset, Lag: l.Lag}
					if l.Member != nil {
						pl.Member = l.Member.ClientID + " " + l.Member.ClientHost
						if l.Member.InstanceID != nil {
							pl.Member = *l.Member.InstanceID + " " + l.Member.ClientHost
						}
					}
					g.Partitions = append(g.Partitions, pl)
				}
			}
			if len(g.Partitions) > 0 {
				groups = append(groups, g)
			}
		}
		return countLag(r.Context(), c.conn, groups)
	}()
	if err != nil {
		pg.Error = err.Error()
	}
	pg.Data = groups
	c.render(w, "groups", pg)
}
