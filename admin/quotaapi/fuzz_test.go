package quotaapi

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/admin/internal/yamlnode"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
	"github.com/sluice-rl/sluice/resources"
)

var qsSeeds = []string{
	``,
	`{}`,
	`null`,
	`{"size": 10, "fill_rate": 5}`,
	`{"name": "users", "namespace": "Pinky", "size": 100, "fill_rate": 50, "wait_timeout_millis": 1000, "max_idle_millis": -1, "max_debt_millis": 10000, "max_tokens_per_request": 50}`,
	`{"size": 0, "fill_rate": "fast", "colour": 1}`,
	`{"size": 1, "fill_rate": 1, "max_idle_millis": 60000, "wait_timeout_millis": 250}`,
	`{"size": 9007199254740993, "fill_rate": 1}`,
	`{"fill_rate": 1.5}`,
	`{"size": 1, "size": 2}`,
	`{"name": "other"}`,
	`{"default_bucket": {"size": 200}, "buckets": {"a": {}, "b": {"fill_rate": 7}}, "max_dynamic_buckets": 3}`,
	`{"default_bucket": {}, "dynamic_bucket_template": {}}`,
	`{"dynamic_bucket_template": {"size": 1, "fill_rate": 1}, "max_dynamic_buckets": 100000}`,
	`{"buckets": {"bad name": {}}}`,
	`{"global_default_bucket": {"size": 5}, "namespaces": {"Pinky": {"buckets": {"x": {}}}, "Brain": {"default_bucket": {}}}, "version": 3, "user": "u", "date": 1}`,
	`{"namespaces": {"Pinky": {"name": "Brain"}}}`,
	`{"namespaces": {"Pinky": null}}`,
	`[1, 2]`,
	`"string"`,
	`{"a": {"b": {"c": {"d": {"e": {}}}}}}`,
	`{"size": 1e400}`,
	`{`,
}

// FuzzQuotaServiceBody: the decoders of the quota service REST API's
// bodies never panic and refuse with *InvalidError; what they accept,
// written into Sluice's document as the handler writes it, loads
// (resources.Parse) and reads back as the same configuration, and a bucket
// written back in the quota service's format (as GET answers it) decodes
// to the same bucket. The seeds run with the normal tests.
func FuzzQuotaServiceBody(f *testing.F) {
	buckets := []struct{ ns, bucket string }{
		{"Pinky", "users"}, {"Pinky", DefaultBucket}, {"Pinky", DynamicBucketTemplate},
		{GlobalNamespace, DefaultBucket}, {"Pinky", "rate_limit/10.0.0.1"},
	}
	for _, s := range qsSeeds {
		for k := range len(buckets) + 2 {
			f.Add([]byte(s), uint8(k))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, which uint8) {
		refused := func(err error) bool {
			if err == nil {
				return false
			}
			var ie *admin.InvalidError
			if !errors.As(err, &ie) || len(ie.Errors) == 0 {
				t.Fatalf("error %v (%T) is not an *InvalidError listing errors", err, err)
			}
			return true
		}
		load := func(d *admin.Document) *resources.Repository {
			t.Helper()
			doc, err := d.Encode()
			if err != nil {
				t.Fatal(err)
			}
			repo, err := resources.Parse(doc)
			if err != nil {
				t.Fatalf("the written document does not load: %v\n%s", err, doc)
			}
			return repo
		}
		empty := func() *admin.Document {
			d, err := admin.ParseDocument(nil)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		switch k := int(which) % (len(buckets) + 2); {
		case k < len(buckets):
			ns, bucket := buckets[k].ns, buckets[k].bucket
			b, err := decodeQSBucket(body, ns, bucket)
			if refused(err) {
				return
			}
			d, o := empty(), bucketObject(ns, bucket)
			if o.Kind != admin.KindGlobalDefault {
				if err := d.Put(admin.Resource(ns), yamlnode.NewMapping(), admin.PutUpsert); err != nil {
					t.Fatal(err)
				}
			}
			if err := d.Put(o, limitsyaml.BucketNode(b), admin.PutUpsert); err != nil {
				t.Fatal(err)
			}
			lc := load(d).Limits()
			var r = lc.Resources[ns]
			if o.Kind == admin.KindGlobalDefault {
				r = nil
			}
			got := bucketOf(lc, r, o)
			if got == nil || !reflect.DeepEqual(*got, b) {
				t.Fatalf("%s: read back as %+v, want %+v", o, got, b)
			}
			js, err := json.Marshal(qsBucket(b, bucket, ns))
			if err != nil {
				t.Fatal(err)
			}
			if ns == GlobalNamespace {
				js, _ = json.Marshal(qsBucket(b, DefaultBucket, ""))
			}
			again, err := decodeQSBucket(js, ns, bucket)
			if err != nil || !reflect.DeepEqual(again, b) {
				t.Fatalf("%s: %s decodes to %+v, %v; want %+v", o, js, again, err, b)
			}
		case k == len(buckets):
			r, err := decodeQSNamespace(body, "Pinky")
			if refused(err) {
				return
			}
			d := empty()
			if err := d.Put(admin.Resource("Pinky"), resourceNode(r, nil), admin.PutCreate); err != nil {
				t.Fatal(err)
			}
			back := load(d).Limits().Resources["Pinky"]
			if back == nil {
				t.Fatal("the namespace did not read back")
			}
			if got, want := qsNamespace("Pinky", back), qsNamespace("Pinky", r); !reflect.DeepEqual(got, want) {
				t.Fatalf("read back as %+v, want %+v", got, want)
			}
		default:
			cfg, err := decodeQSService(body)
			if refused(err) {
				return
			}
			d := empty()
			for name, r := range cfg.Resources {
				if err := d.Put(admin.Resource(name), resourceNode(r, nil), admin.PutCreate); err != nil {
					t.Fatal(err)
				}
			}
			if cfg.GlobalDefault != nil {
				if err := d.Put(admin.GlobalDefault(), limitsyaml.BucketNode(*cfg.GlobalDefault), admin.PutCreate); err != nil {
					t.Fatal(err)
				}
			}
			if got, want := qsServiceConfig(load(d).Limits()), qsServiceConfig(cfg); !reflect.DeepEqual(got, want) {
				t.Fatalf("read back as %+v, want %+v", got, want)
			}
		}
	})
}
