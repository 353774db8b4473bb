package sim

import (
	"fmt"
	"testing"
)

func TestDebugTmp(t *testing.T) {
	sc, _ := Lookup("seven")
	sc, _ = sc.withDefaults()
	s, err := newSim(sc, Options{Seed: 1, Duration: 3000})
	if err != nil {
		t.Fatal(err)
	}
	s.onSample = func(s *sim) {
		now := s.elapsed()
		if int(now)%5 != 0 || now < 2310 || now > 2420 {
			return
		}
		line := fmt.Sprintf("%v", now)
		for _, nd := range s.nodes {
			if nd.master < 0 {
				line += fmt.Sprintf(" | %s down", nd.name)
				continue
			}
			st, _ := nd.tasks[nd.master].srv.Status(ResourceID)
			line += fmt.Sprintf(" | %s cap %.0f has %.0f wants %.0f L=%v", nd.name, st.Capacity, st.SumHas, st.SumWants, st.Learning)
		}
		fmt.Println(line)
	}
	s.run()
	for _, m := range s.series.Mishaps {
		if m.T > 2200 && m.T < 2450 {
			fmt.Println(m)
		}
	}
}
