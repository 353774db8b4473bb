package names

import "testing"

func TestSetting(t *testing.T) {
	flags := map[string]string{"Sessions.Max": "--max-sessions"}
	for _, c := range []struct {
		name func(string) string
		path string
		want string
	}{
		{nil, "Sessions.Max", "Sessions.Max"},
		{func(p string) string { return flags[p] }, "Sessions.Max", "--max-sessions"},
		{func(p string) string { return flags[p] }, "Admin.Insecure", "Admin.Insecure"}, // "" falls back to the path
	} {
		if got := Setting(c.name, c.path); got != c.want {
			t.Errorf("Setting(%s) = %q, want %q", c.path, got, c.want)
		}
	}
}
