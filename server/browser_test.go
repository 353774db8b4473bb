package server

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/resources"
	sitestatus "github.com/sluice-rl/sluice/server/status"
)

// chromium returns the path of Debian's chromium (installed by .ci/run);
// the test fails without it unless SLUICE_SKIP_BROWSER=1.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("SLUICE_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := exec.LookPath(p); err == nil {
			return p
		}
	}
	if os.Getenv("SLUICE_SKIP_BROWSER") == "1" {
		t.Skip("SLUICE_SKIP_BROWSER=1 and no chromium")
	}
	t.Fatal("chromium not found (apt-get install chromium, or SLUICE_SKIP_BROWSER=1)")
	return ""
}

// browser starts headless Chromium (exe, from chromium) for one test and
// returns its context, which ends with ctx, after timeout, or at the
// test's end.
func browser(t *testing.T, ctx context.Context, exe string, timeout time.Duration) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 900),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	bctx, tcancel := context.WithTimeout(bctx, timeout)
	t.Cleanup(tcancel)
	return bctx
}

// The status pages in a real browser: filter and sort the resources table,
// open a resource page, check its values against the server's state, watch
// the live chart draw, and take screenshots.
func TestStatusPageInBrowser(t *testing.T) {
	exe := chromium(t)
	// Token buckets for the buckets page: user-00 … user-29, user-<i>
	// granted i%10 + 1 tokens of 10, every third one rejected once. Run
	// sweeps every second, so the chart gets samples.
	s, _ := startServer(t, Config{ID: "test", Repository: Repository{Fixed: resources.Compose(doormanRepo(t), &limits.Config{Resources: map[string]*limits.Resource{"users": {Template: &limits.Bucket{
		Size: 10, FillRate: 0.001, MaxIdle: -1, MaxTokensPerRequest: 10}}}}, nil, nil)}})
	for i, w := range []float64{30, 90, 50} {
		getCap(t, s, fmt.Sprintf("client-%d", i), "fair", w)
	}
	for i := range 4 {
		getCap(t, s, fmt.Sprintf("client-%d", i), fmt.Sprintf("fixed/%c", 'a'+i), float64(2+i))
	}
	s.Capacity().Sweep()
	for i := range 30 {
		d := fmt.Sprintf("user-%02d", i)
		s.Limits().Engine().Allow(context.Background(), time.Now(), limits.Request{Resource: "users", Domain: d, Tokens: int64(i%10 + 1)})
		if i%3 == 0 {
			s.Limits().Engine().Allow(context.Background(), time.Now(), limits.Request{Resource: "users", Domain: d, Tokens: 10})
		}
	}
	base := "http://" + s.Addr()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	bctx := browser(t, ctx, exe, 60*time.Second)

	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	step("open the status page", chromedp.Do(bctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(css("#resources")),
	))
	mastership, err := chromedp.Run(bctx, chromedp.Text(css("#mastership")))
	step("read mastership", err)
	if strings.TrimSpace(mastership) != "master" {
		t.Errorf("mastership shows %q", mastership)
	}
	// Filter by prefix, then sort by Σ wants (twice: descending).
	sortByWants := chromedp.Search(`//table[@id="resources"]//th/a[text()="Σ wants"]`)
	step("filter and sort", chromedp.Do(bctx,
		chromedp.SetValue(css(`#filter input[name="prefix"]`), "fixed/"),
		chromedp.Submit(css(`#filter input[name="prefix"]`)),
		chromedp.WaitVisible(css(`#resources`)),
		chromedp.Click(sortByWants),
		chromedp.WaitVisible(css(`#resources`)),
		chromedp.Click(sortByWants),
		chromedp.WaitVisible(css(`#resources`)),
	))
	ids, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#resources tbody td.id")].map(e => e.textContent)`))
	step("read the table", err)
	if got := strings.Join(ids, ","); got != "fixed/d,fixed/c,fixed/b,fixed/a" {
		t.Fatalf("filtered by fixed/ and sorted by Σ wants descending: %s", got)
	}
	shot1, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	step("screenshot", err)

	// The resource page: values match the server's state; the chart draws.
	want, err := s.Status().ResourceStatusPage("fair", sitestatus.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	step("open the resource page", chromedp.Do(bctx,
		chromedp.Navigate(base+"/debug/status"),
		chromedp.Click(chromedp.Search(`//table[@id="resources"]//a[text()="fair"]`)),
		chromedp.WaitVisible(css(`#leases`)),
		chromedp.WaitVisible(css(`#chart polyline.series-has`)),
	))
	// The chart updates without a reload: wait for a few samples.
	for deadline := time.Now().Add(20 * time.Second); ; {
		n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelector("#chart polyline.series-has").points.length`))
		step("count chart points", err)
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the chart has %d points after 20 s, want it to grow every second", n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	text := func(sel string) string {
		v, err := chromedp.Run(bctx, chromedp.Text(css(sel)))
		step("read "+sel, err)
		return v
	}
	capacity, has, wants, clients := text("#capacity"), text("#sum-has"), text("#sum-wants"), text("#clients")
	leases, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#leases tbody td.id")].map(e => e.textContent)`))
	step("read leases", err)
	polylines, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("#chart polyline").length`))
	step("read the chart", err)
	shot2, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	step("screenshot", err)
	r := want.Resource
	if capacity != pageNum(r.Capacity) || has != pageNum(r.SumHas) || wants != pageNum(r.SumWants) || clients != fmt.Sprint(r.Clients) {
		t.Errorf("page shows capacity %s Σ has %s Σ wants %s clients %s; server has %s %s %s %d",
			capacity, has, wants, clients, pageNum(r.Capacity), pageNum(r.SumHas), pageNum(r.SumWants), r.Clients)
	}
	if strings.Join(leases, ",") != "client-0,client-1,client-2" {
		t.Errorf("leases %v", leases)
	}
	if polylines != 3 {
		t.Errorf("chart has %d lines, want capacity, Σ has and Σ wants", polylines)
	}
	// The buckets page: filter by prefix and a numeric predicate, sort by
	// a column (twice: descending), page through, and read the top lists.
	cells := func(table, class string) []string {
		v, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](fmt.Sprintf(`[...document.querySelectorAll("#%s tbody td.%s")].map(e => e.textContent)`, table, class)))
		step("read #"+table, err)
		return v
	}
	sortByTokens := chromedp.Search(`//table[@id="buckets"]//th/a[text()="tokens"]`)
	step("filter the buckets", chromedp.Do(bctx,
		chromedp.Navigate(base+"/debug/status"),
		chromedp.Click(css("#buckets-link")),
		chromedp.WaitVisible(css("#buckets")),
		chromedp.SetValue(css(`#filter input[name="prefix"]`), "users/user-1"),
		chromedp.SetValue(css(`#filter input[name="where"]`), "fraction<0.5"),
		chromedp.Submit(css(`#filter input[name="prefix"]`)),
		chromedp.WaitVisible(css("#buckets")),
		chromedp.Click(sortByTokens),
		chromedp.WaitVisible(css("#buckets")),
		chromedp.Click(sortByTokens),
		chromedp.WaitVisible(css("#buckets")),
	))
	// user-10 … user-19 took 1 … 10 tokens (then user-12, 15, 18 were
	// refused 10 more): fraction < 0.5 leaves those that took 6 or more,
	// user-15 … user-19, sorted by tokens left, most first.
	if got := strings.Join(cells("buckets", "id"), ","); got != "users/user-15,users/user-16,users/user-17,users/user-18,users/user-19" {
		t.Errorf("users/user-1*, fraction<0.5, by tokens descending: %s", got)
	}
	count := text("#count")
	if !strings.HasPrefix(count, "5 of 30 buckets") {
		t.Errorf("count reads %q", count)
	}
	shot3, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	step("screenshot", err)
	step("page through", chromedp.Do(bctx,
		chromedp.Navigate(base+"/debug/status/buckets?per_page=12&sort=key"),
		chromedp.WaitVisible(css("#buckets")),
		chromedp.Click(css("#next")),
		chromedp.WaitVisible(css("#buckets")),
	))
	if got := cells("buckets", "id"); len(got) != 12 || got[0] != "users/user-12" {
		t.Errorf("page 2 of 12 by key: %v", got)
	}
	if got := strings.Join(cells("rejected", "id"), ","); got != "users/user-00,users/user-03,users/user-06,users/user-09,users/user-12,users/user-15,users/user-18,users/user-21,users/user-24,users/user-27" {
		t.Errorf("most rejected: %s", got)
	}

	dir := os.Getenv("SLUICE_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	for name, b := range map[string][]byte{"status.png": shot1, "resource.png": shot2, "buckets.png": shot3} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s (%d bytes)", p, len(b))
	}
}

// pageNum is a number as the status pages print it: "∞" for unlimited (a
// nil capacity), else up to three decimals.
func pageNum(v any) string {
	switch x := v.(type) {
	case *float64:
		if x == nil {
			return "∞"
		}
		return pageNum(*x)
	case float64:
		if math.IsInf(x, 0) {
			return "∞"
		}
		return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", x), "0"), ".")
	}
	return fmt.Sprint(v)
}
