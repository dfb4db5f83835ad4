package meta

import (
	"errors"
	"reflect"
	"testing"
)

func userEntity(name string) QuotaEntity { return QuotaEntity{User: QuotaNamed(name)} }

// KIP-546: keys are set and removed per entity; an entity whose last key
// is removed is gone.
func TestAlterClientQuotasSetsAndRemoves(t *testing.T) {
	h := newHarness(t)
	alice := userEntity("alice")
	both := QuotaEntity{User: QuotaDefault(), ClientID: QuotaNamed("app")}
	h.must(kindAlterClientQuotas, alterClientQuotasCmd{Alterations: []QuotaAlteration{
		{Entity: alice, Set: map[string]float64{QuotaProducerByteRate: 1024, QuotaRequestPercentage: 12.5}},
		{Entity: both, Set: map[string]float64{QuotaConsumerByteRate: 2048}},
	}})
	st := h.f.state()
	if v, ok := st.ClientQuota(alice, QuotaRequestPercentage); !ok || v != 12.5 {
		t.Fatalf("alice request_percentage = %v, %v", v, ok)
	}
	if _, ok := st.ClientQuota(QuotaEntity{User: QuotaDefault()}, QuotaConsumerByteRate); ok {
		t.Fatal("the default user alone got the (default user, app) quota")
	}

	h.must(kindAlterClientQuotas, alterClientQuotasCmd{Alterations: []QuotaAlteration{
		{Entity: alice, Remove: []string{QuotaProducerByteRate}},
		{Entity: both, Remove: []string{QuotaConsumerByteRate}},
	}})
	after := h.f.state()
	if got := after.ClientQuotas[alice]; !reflect.DeepEqual(got, map[string]float64{QuotaRequestPercentage: 12.5}) {
		t.Fatalf("alice = %v", got)
	}
	if _, ok := after.ClientQuotas[both]; ok {
		t.Fatal("an entity with no keys left is still listed")
	}
	// The earlier state is untouched (states are immutable).
	if _, ok := st.ClientQuota(alice, QuotaProducerByteRate); !ok {
		t.Fatal("the alteration modified the previous state")
	}
	// Removing what is not there changes nothing.
	h.must(kindAlterClientQuotas, alterClientQuotasCmd{Alterations: []QuotaAlteration{{Entity: alice, Remove: []string{QuotaConsumerByteRate}}}})
	if h.f.state() != after {
		t.Fatal("a no-op alteration published a new state")
	}
}

func TestQuotaAlterationValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    QuotaAlteration
	}{
		{"empty entity", QuotaAlteration{Set: map[string]float64{QuotaProducerByteRate: 1}}},
		{"empty name", QuotaAlteration{Entity: userEntity(""), Set: map[string]float64{QuotaProducerByteRate: 1}}},
		{"unknown key", QuotaAlteration{Entity: userEntity("a"), Set: map[string]float64{"bytes_per_fortnight": 1}}},
		{"unknown removed key", QuotaAlteration{Entity: userEntity("a"), Remove: []string{"nope"}}},
		{"zero", QuotaAlteration{Entity: userEntity("a"), Set: map[string]float64{QuotaProducerByteRate: 0}}},
		{"negative", QuotaAlteration{Entity: userEntity("a"), Set: map[string]float64{QuotaRequestPercentage: -5}}},
		{"fraction of a byte", QuotaAlteration{Entity: userEntity("a"), Set: map[string]float64{QuotaConsumerByteRate: 1.5}}},
		{"set and removed", QuotaAlteration{Entity: userEntity("a"), Set: map[string]float64{QuotaConsumerByteRate: 1}, Remove: []string{QuotaConsumerByteRate}}},
	} {
		if err := tc.a.Validate(); !errors.Is(err, ErrInvalidQuota) {
			t.Errorf("%s: err = %v, want ErrInvalidQuota", tc.name, err)
		}
	}
	ok := QuotaAlteration{Entity: QuotaEntity{User: QuotaNamed("a"), ClientID: QuotaDefault()}, Set: map[string]float64{QuotaRequestPercentage: 0.5, QuotaControllerMutationRate: 3}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	// An invalid alteration in the log is refused whole.
	h := newHarness(t)
	h.wantErr(errBadCommand, kindAlterClientQuotas, alterClientQuotasCmd{Alterations: []QuotaAlteration{ok, {Entity: userEntity("b"), Set: map[string]float64{"x": 1}}}})
}

// KIP-546's filters: exact, default and any-specified components, and
// strict, which excludes entities with components of other types.
func TestDescribeClientQuotasFilters(t *testing.T) {
	h := newHarness(t)
	rate := map[string]float64{QuotaProducerByteRate: 1}
	entities := []QuotaEntity{
		userEntity("alice"),
		{User: QuotaDefault()},
		{User: QuotaNamed("alice"), ClientID: QuotaNamed("app")},
		{User: QuotaNamed("alice"), ClientID: QuotaDefault()},
		{ClientID: QuotaNamed("app")},
		{ClientID: QuotaDefault()},
	}
	var alts []QuotaAlteration
	for _, e := range entities {
		alts = append(alts, QuotaAlteration{Entity: e, Set: rate})
	}
	h.must(kindAlterClientQuotas, alterClientQuotasCmd{Alterations: alts})
	st := h.f.state()
	name := func(s string) *string { return &s }
	describe := func(strict bool, cs ...QuotaFilterComponent) []string {
		t.Helper()
		got, err := st.DescribeClientQuotas(cs, strict)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, q := range got {
			out = append(out, q.Entity.String())
		}
		return out
	}
	for _, tc := range []struct {
		strict bool
		cs     []QuotaFilterComponent
		want   []string
	}{
		{false, nil, []string{"user=<default>", "user=alice", "user=alice,client-id=<default>", "user=alice,client-id=app", "client-id=<default>", "client-id=app"}},
		{true, nil, nil},
		{false, []QuotaFilterComponent{{EntityType: QuotaEntityUser, Match: QuotaMatchExact, Name: name("alice")}},
			[]string{"user=alice", "user=alice,client-id=<default>", "user=alice,client-id=app"}},
		{true, []QuotaFilterComponent{{EntityType: QuotaEntityUser, Match: QuotaMatchExact, Name: name("alice")}},
			[]string{"user=alice"}},
		{true, []QuotaFilterComponent{{EntityType: QuotaEntityUser, Match: QuotaMatchDefault}},
			[]string{"user=<default>"}},
		{false, []QuotaFilterComponent{{EntityType: QuotaEntityClientID, Match: QuotaMatchAny}},
			[]string{"user=alice,client-id=<default>", "user=alice,client-id=app", "client-id=<default>", "client-id=app"}},
		{true, []QuotaFilterComponent{{EntityType: QuotaEntityClientID, Match: QuotaMatchAny}},
			[]string{"client-id=<default>", "client-id=app"}},
		{false, []QuotaFilterComponent{
			{EntityType: QuotaEntityUser, Match: QuotaMatchAny},
			{EntityType: QuotaEntityClientID, Match: QuotaMatchDefault},
		}, []string{"user=alice,client-id=<default>"}},
		{false, []QuotaFilterComponent{{EntityType: QuotaEntityIP, Match: QuotaMatchAny}}, nil},
	} {
		if got := describe(tc.strict, tc.cs...); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("strict=%v %+v:\n got %q\nwant %q", tc.strict, tc.cs, got, tc.want)
		}
	}

	for _, tc := range []struct {
		cs   []QuotaFilterComponent
		want error
	}{
		{[]QuotaFilterComponent{{EntityType: "group", Match: QuotaMatchAny}}, ErrUnsupportedQuotaFilter},
		{[]QuotaFilterComponent{{EntityType: QuotaEntityUser, Match: 7}}, ErrUnsupportedQuotaFilter},
		{[]QuotaFilterComponent{{EntityType: QuotaEntityUser, Match: QuotaMatchExact}}, ErrInvalidQuota},
		{[]QuotaFilterComponent{{EntityType: QuotaEntityUser, Match: QuotaMatchDefault, Name: name("x")}}, ErrInvalidQuota},
		{[]QuotaFilterComponent{{EntityType: QuotaEntityUser, Match: QuotaMatchAny}, {EntityType: QuotaEntityUser, Match: QuotaMatchAny}}, ErrInvalidQuota},
		{[]QuotaFilterComponent{{EntityType: QuotaEntityUser, Match: QuotaMatchAny}, {EntityType: QuotaEntityIP, Match: QuotaMatchAny}}, ErrInvalidQuota},
	} {
		if _, err := st.DescribeClientQuotas(tc.cs, false); !errors.Is(err, tc.want) {
			t.Errorf("%+v: err = %v, want %v", tc.cs, err, tc.want)
		}
	}
}

// Snapshots carry the quotas, and a restored FSM describes the same.
func TestClientQuotasSurviveSnapshot(t *testing.T) {
	src := newHarness(t)
	src.must(kindAlterClientQuotas, alterClientQuotasCmd{Alterations: []QuotaAlteration{
		{Entity: userEntity("alice"), Set: map[string]float64{QuotaProducerByteRate: 5 << 20}},
		{Entity: QuotaEntity{ClientID: QuotaDefault()}, Set: map[string]float64{QuotaRequestPercentage: 25}},
	}})
	snap, err := src.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	dst := newHarness(t)
	if err := dst.f.Restore(sink.reader()); err != nil {
		t.Fatal(err)
	}
	if got, want := dst.f.state().ClientQuotas, src.f.state().ClientQuotas; !reflect.DeepEqual(got, want) {
		t.Fatalf("restored quotas %v, want %v", got, want)
	}
}
