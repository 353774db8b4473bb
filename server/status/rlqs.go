package status

import (
	"net/http"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/server/status/view"
)

// RLQSView is what the site reads of Envoy's Rate Limit Quota Service
// (rlqs.Service): its streams and their buckets.
type RLQSView interface {
	Streams() []view.StreamStatus
}

// MaxRLQSRows bounds the (stream, bucket) rows of one /debug/status/rlqs
// page; the counts cover them all.
const MaxRLQSRows = 1000

// RLQSPage is the /debug/status/rlqs page's data: the streams, and their
// buckets whose resource starts with Prefix (at most MaxRLQSRows).
type RLQSPage struct {
	Streams int       `json:"streams"`
	Buckets int       `json:"buckets"` // (stream, bucket) pairs, all of them
	Shown   int       `json:"shown"`   // rows matching Prefix (Rows holds at most MaxRLQSRows)
	Prefix  string    `json:"prefix,omitempty"`
	Rows    []RLQSRow `json:"rows"`
}

// RLQSRow is one (stream, bucket) pair. Rates are requests per second;
// ExpiresIn is seconds.
type RLQSRow struct {
	Client string `json:"client"`
	Peer   string `json:"peer"`
	Domain string `json:"domain"`
	view.BucketStatus
	ExpiresIn float64 `json:"expires_in"`
}

// RLQSStatusPage returns the /debug/status/rlqs data: rows of buckets
// whose resource starts with prefix, by stream then resource.
func (s *Site) RLQSStatusPage(prefix string) RLQSPage {
	p := RLQSPage{Prefix: prefix, Rows: []RLQSRow{}}
	if s.v.RLQS == nil {
		return p
	}
	now := s.v.Now()
	for _, st := range s.v.RLQS.Streams() {
		p.Streams++
		p.Buckets += len(st.Buckets)
		for _, b := range st.Buckets {
			if !strings.HasPrefix(b.Resource, prefix) {
				continue
			}
			p.Shown++
			if len(p.Rows) < MaxRLQSRows {
				r := RLQSRow{Client: st.Client, Peer: st.Peer, Domain: st.Domain, BucketStatus: b}
				if !b.Expiry.IsZero() {
					r.ExpiresIn = max(b.Expiry.Sub(now), 0).Round(time.Second).Seconds()
				}
				p.Rows = append(p.Rows, r)
			}
		}
	}
	return p
}

func (s *Site) handleRLQS(w http.ResponseWriter, r *http.Request) {
	p := s.RLQSStatusPage(r.URL.Query().Get("prefix"))
	if wantsJSON(r) {
		writeJSON(w, p)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pages.ExecuteTemplate(w, "rlqs.html", p); err != nil {
		s.v.Logger.Error("rlqs page", "err", err)
	}
}
