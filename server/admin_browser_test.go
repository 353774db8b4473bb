package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/admin/adminhttp"
	"github.com/sluice-rl/sluice/limits"
)

const adminPageDoc = `# the admin page's test
limits:
  resources:
    api:
      domains:
        big: {size: 100, fill_rate: 50} # the big tenant
`

// startAdminServer runs a server as `sluice server --config FILE` does
// with the admin flags a (Insecure: --admin-insecure): the file in
// t.TempDir() holding adminPageDoc, watched and applied, the admin API at
// /admin/v1/ on the server's one port. It returns the server and its base
// URL.
func startAdminServer(t *testing.T, id string, a Admin) (*Server, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(adminPageDoc), 0o644); err != nil {
		t.Fatal(err)
	}
	s, _ := startServer(t, Config{ID: id, Admin: a, Repository: Repository{Path: path}})
	return s, "http://" + s.Addr()
}

// The admin page in a real browser (docs/admin.md, "The page"): create a quota
// bucket through the page (an invalid value first: its errors shown,
// naming the field; then the dry run's diff), change its fill rate, see
// the change on the buckets page and in an Allow answer; a stale edit is
// refused with the API's 409 message; the history diffs a version.
func TestAdminPageInBrowser(t *testing.T) {
	exe := chromium(t)
	s, base := startAdminServer(t, "admin-page", Admin{Insecure: true})
	bctx := browser(t, context.Background(), exe, 90*time.Second)

	css, step, text, waitText, edit := pageHelpers(t, bctx)

	// allowDelay takes a full bucket's 10 tokens and asks for one more
	// at the same instant, waiting for nothing: the answer's retry-after is
	// 1 ÷ fill rate. Refused requests take nothing, so the bucket is full
	// again after 10 ÷ fill rate. ok is false while the bucket does not
	// exist or is not full.
	allowDelay := func(domain string) (time.Duration, bool) {
		now := time.Now()
		d := s.Limits().Engine().Allow(context.Background(), now, limits.Request{Resource: "api", Domain: domain, Tokens: 10, HasMaxWait: true})
		if d.Status != limits.StatusOK {
			return 0, false
		}
		d = s.Limits().Engine().Allow(context.Background(), now, limits.Request{Resource: "api", Domain: domain, Tokens: 1, HasMaxWait: true})
		if d.Status != limits.StatusTimeout {
			t.Fatalf("api/%s: one more token than the bucket holds, not waiting: %+v", domain, d)
		}
		return d.RetryAfter, true
	}
	waitDelay := func(domain string, lo, hi time.Duration) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			got, ok := allowDelay(domain)
			if ok && got >= lo && got <= hi {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("api/%s: Allow after the bucket is emptied waits %v (bucket exists: %v), want %v to %v", domain, got, ok, lo, hi)
			}
		}
	}

	// Browse: the resources, then api's buckets.
	step("open the admin page", chromedp.Do(bctx,
		chromedp.Navigate(base+"/debug/status"),
		chromedp.Click(css("#admin-link")),
		chromedp.WaitVisible(css("#objects")),
	))
	waitText("#version", "1")
	waitText("#objects", "limits/resources/api")
	step("open api", chromedp.Do(bctx, chromedp.Click(chromedp.Search(`//table[@id="objects"]//a[text()="limits/resources/api"]`))))
	waitText("#domains", "limits/resources/api/domains/big")
	waitText("#yaml", "the big tenant") // the resource in the editor, comments kept

	// A new bucket: an invalid value first, refused with its errors.
	const bucket = "limits/resources/api/domains/tenant-1"
	step("load a new bucket", chromedp.Do(bctx,
		chromedp.SetValue(css("#path"), bucket),
		chromedp.Click(css("#load")),
	))
	waitText("#mode", "new object")
	edit("size: 10\nfill_rate: -1\nwait_timeout: soon\n", "#save")
	waitText("#message", "fill_rate")
	errs, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#errors li")].map(e => e.textContent)`))
	step("read the errors", err)
	if all := strings.Join(errs, "\n"); len(errs) < 2 || !strings.Contains(all, "fill_rate") || !strings.Contains(all, "wait_timeout") {
		t.Errorf("errors of an invalid bucket, want each field named:\n%s", all)
	}
	// The dry run shows the diff and stores nothing.
	edit("size: 10\nfill_rate: 1\nmax_tokens_per_request: 10\n", "#preview")
	waitText("#message", "dry run")
	diff := text("#diff")
	if !strings.Contains(diff, "+        tenant-1:") && !strings.Contains(diff, "+        tenant-1: {") {
		t.Errorf("dry-run diff does not add tenant-1:\n%s", diff)
	}
	if v := text("#version"); v != "1" {
		t.Errorf("version after a dry run: %s, want 1", v)
	}
	if d := s.Limits().Engine().Allow(context.Background(), time.Now(), limits.Request{Resource: "api", Domain: "tenant-1", HasMaxWait: true}); d.Status != limits.StatusNoBucket {
		t.Errorf("api/tenant-1 after a dry run: %v, want no bucket", d.Status)
	}
	// Save: created, applied by the server's watcher.
	edit("size: 10\nfill_rate: 1\nmax_tokens_per_request: 10\n", "#save")
	waitText("#message", "saved: version 2")
	waitDelay("tenant-1", 900*time.Millisecond, 1100*time.Millisecond)

	// Change its fill rate: the diff shows it, the Allow answer and the
	// buckets page follow.
	edit("size: 10\nfill_rate: 1000\nmax_tokens_per_request: 10\n", "#save")
	waitText("#message", "saved: version 3")
	if diff := text("#diff"); !strings.Contains(diff, "-") || !strings.Contains(diff, "1000") {
		t.Errorf("diff of the fill-rate change:\n%s", diff)
	}
	waitDelay("tenant-1", 0, 10*time.Millisecond)
	step("the buckets page", chromedp.Do(bctx,
		chromedp.Navigate(base+"/debug/status/buckets?prefix=api/tenant-1"),
		chromedp.WaitVisible(css("#buckets")),
	))
	row, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#buckets tbody tr:first-child td")].map(e => e.textContent)`))
	step("read the buckets table", err)
	if len(row) < 4 || row[0] != "api/tenant-1" || row[2] != "10" || row[3] != "1000" {
		t.Errorf("buckets page row %q, want api/tenant-1 of size 10 filling 1000/s", row)
	}

	// A stale edit: the page reads version 3, another writer makes 4.
	step("reopen the bucket", chromedp.Do(bctx,
		chromedp.Navigate(base+"/debug/status/admin"),
		chromedp.WaitVisible(css("#path")),
		chromedp.SetValue(css("#path"), bucket),
		chromedp.Click(css("#load")),
	))
	waitText("#mode", "version 3 read")
	req, err := http.NewRequest(http.MethodPut, base+adminhttp.Prefix+bucket, strings.NewReader(`{"size": 10, "fill_rate": 5, "max_tokens_per_request": 10}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("If-Match", `"3"`)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var res admin.Result
	_ = json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || res.Version != 4 {
		t.Fatalf("PUT through the API: %s, version %d", resp.Status, res.Version)
	}
	edit("size: 10\nfill_rate: 7\nmax_tokens_per_request: 10\n", "#save")
	if msg := waitText("#message", "configuration changed"); msg != "configuration changed since you read it: version 4 now" {
		t.Errorf("stale save shows %q", msg)
	}
	waitDelay("tenant-1", 190*time.Millisecond, 210*time.Millisecond) // 5/s stays

	// The history: four versions, and the diff of version 3.
	step("reload the history", chromedp.Do(bctx, chromedp.Click(css("#history-go"))))
	waitText("#history tbody", "4")
	versions, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#history tbody tr td:first-child")].map(e => e.textContent)`))
	step("read the history", err)
	if strings.Join(versions, ",") != "4,3,2,1" {
		t.Errorf("history versions %v, want 4,3,2,1", versions)
	}
	step("diff version 3", chromedp.Do(bctx, chromedp.Click(chromedp.Search(`//table[@id="history"]//tr[td[1]="3"]//a[text()="diff"]`))))
	hd := waitText("#history-diff", "1000")
	if !strings.Contains(hd, "version 2") || !strings.Contains(hd, "version 3") {
		t.Errorf("diff of version 3:\n%s", hd)
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	step("screenshot", err)
	if dir := os.Getenv("SLUICE_SCREENSHOT_DIR"); dir != "" {
		p := filepath.Join(dir, "admin.png")
		if err := os.WriteFile(p, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s (%d bytes)", p, len(shot))
	}
}

// pageHelpers returns the admin page tests' steps on the browser bctx:
// css selects, step fails the test on an error, text reads an element's
// text (a textarea's value), waitText waits for an element's text to
// contain a string (the page's fetches are asynchronous) and returns it,
// edit puts YAML in the editor and clicks a button.
func pageHelpers(t *testing.T, bctx context.Context) (
	css func(string) chromedp.CSS,
	step func(string, error),
	text func(string) string,
	waitText func(sel, want string) string,
	edit func(yaml, button string),
) {
	css = func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	step = func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text = func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[string](fmt.Sprintf(`(e => !e ? "" : e.tagName === "TEXTAREA" ? e.value : e.textContent)(document.querySelector(%q))`, sel)))
		step("read "+sel, err)
		return v
	}
	// waitText waits for sel's text to contain want (the page's fetches
	// are asynchronous).
	waitText = func(sel, want string) string {
		t.Helper()
		var got string
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if got = text(sel); strings.Contains(got, want) {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s reads %q, want it to contain %q", sel, got, want)
			}
		}
	}
	edit = func(yaml, button string) {
		t.Helper()
		step("clear the message", chromedp.Do(bctx, chromedp.Evaluate[chromedp.Void](`document.getElementById("message").textContent = ""`)))
		step("edit and click "+button, chromedp.Do(bctx,
			chromedp.SetValue(css("#yaml"), yaml),
			chromedp.Click(css(button)),
		))
	}
	return css, step, text, waitText, edit
}

// The admin page with --admin-token-file: a save without a token is
// refused with the API's 401 message; with the token typed into the page
// (kept in sessionStorage, sent as Authorization: Bearer) it is saved,
// and the history names the token's user.
func TestAdminPageToken(t *testing.T) {
	exe := chromium(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("alice s3cret-token-for-alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, base := startAdminServer(t, "admin-token", Admin{TokenFile: tokens})
	bctx := browser(t, context.Background(), exe, 60*time.Second)
	css, step, text, waitText, edit := pageHelpers(t, bctx)

	step("open the admin page", chromedp.Do(bctx,
		chromedp.Navigate(base+"/debug/status/admin"),
		chromedp.WaitVisible(css("#path")),
		chromedp.SetValue(css("#path"), "limits/resources/api/domains/big"),
		chromedp.Click(css("#load")),
	))
	waitText("#mode", "version 1 read")
	edit("{size: 100, fill_rate: 60}", "#save")
	waitText("#message", "authentication required")
	waitText("#mode", "not allowed")
	step("give the token", chromedp.Do(bctx,
		chromedp.SetValue(css("#token"), "s3cret-token-for-alice"),
		chromedp.Click(css("#token-save")),
	))
	edit("{size: 100, fill_rate: 60}", "#save")
	waitText("#message", "saved: version 2")
	waitText("#history tbody", "alice")
	stored, err := chromedp.Run(bctx, chromedp.Evaluate[string](`sessionStorage.getItem("sluice-admin-token")`))
	step("read sessionStorage", err)
	if stored != "s3cret-token-for-alice" {
		t.Errorf("sessionStorage holds %q", stored)
	}
	if m := text("#message"); m != "saved: version 2" {
		t.Errorf("message %q", m)
	}
}
