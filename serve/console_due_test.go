package serve_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/serve"
)

// TestConsoleDueTasks: a queue's page lists the tasks waiting for their
// due time soonest first, with their due times, and cancels one from its
// row: the list comes back without it (its record ends canceled at once),
// and says what the cancel did.
func TestConsoleDueTasks(t *testing.T) {
	chromium := testutil.Tool(t, "chromium", "chromium")
	a := start(t, serve.CreateQueues(2))
	tok := a.token("shop", false)
	for _, p := range []string{"?id=c-3h&delay=10800", "?id=a-1h&delay=3600", "?id=b-2h&delay=7200", "?id=now-1"} {
		if code, body := a.do("PUT", "/api/shop/jobs"+p, tok, "x"); code != 201 {
			t.Fatalf("publish %s: %d %v", p, code, body)
		}
	}
	b := newBrowser(t, chromium)
	b.login(a.url, tok)
	rows := func() []string {
		t.Helper()
		ids, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#tasks tr[data-id]")].map(r => r.dataset.id)`))
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	b.run("the queue", chromedp.Navigate(a.url+"/console/q/shop.jobs"), chromedp.WaitVisible(chromedp.CSS("#duetab")))
	if tab := b.text("#duetab"); tab != "due soonest (3)" {
		t.Fatalf("the due tab: %q, want it to count the 3 scheduled tasks", tab)
	}
	b.run("due soonest", chromedp.Click(chromedp.CSS("#duetab")), chromedp.WaitVisible(chromedp.CSS(`#tasks tr[data-id="a-1h"]`)), b.shot("due"))
	if ids := rows(); len(ids) != 3 || ids[0] != "a-1h" || ids[1] != "b-2h" || ids[2] != "c-3h" {
		t.Fatalf("due soonest first: %v, want a-1h b-2h c-3h", ids)
	}
	if due := b.text(`#tasks tr[data-id="a-1h"] .due`); len(due) < 20 {
		t.Fatalf("a-1h's due time: %q", due)
	}
	b.run("cancel b-2h", chromedp.Click(chromedp.CSS(`#tasks tr[data-id="b-2h"] .cancel`)), chromedp.WaitVisible(chromedp.CSS("#flash")))
	if msg := b.text("#flash"); !strings.Contains(msg, "canceled task b-2h") {
		t.Fatalf("the cancel's flash: %q", msg)
	}
	if ids := rows(); len(ids) != 2 || ids[0] != "a-1h" || ids[1] != "c-3h" {
		t.Fatalf("due soonest after canceling b-2h: %v, want a-1h c-3h", ids)
	}
}
