package graph_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/graph"
)

// What a query costs multiplies by the size of every list in it, so that
// nesting lists (each level multiplies the answer) or repeating a large
// page under aliases is refused before anything runs, as is nesting past
// the depth limit; a page of a thousand jobs, or the whole schema's
// introspection, still passes.
func TestQueryCostFollowsListSizes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	nested := "{ organisations { pools { organisation { pools { organisation { pools { organisation { pools { id } } } } } } } } }"
	r := b.do(t, b.memberA, nested, nil)
	require.Equal(t, "COMPLEXITY_LIMIT_EXCEEDED", r.code(), r.Raw)
	require.Nil(t, r.Data)

	var aliases strings.Builder
	aliases.WriteString("{ ")
	for i := range 25 {
		aliases.WriteString("j" + string(rune('a'+i)) + ": jobs(first: 1000) { nodes { command } } ")
	}
	aliases.WriteString("}")
	r = b.do(t, b.memberA, aliases.String(), nil)
	require.Equal(t, "COMPLEXITY_LIMIT_EXCEEDED", r.code(), r.Raw)

	r = b.do(t, b.memberA, `{ jobs(first: 1000) { nodes { id state command envNames events { nodes { type at } } runs { attempt exitCode } } } }`, nil)
	require.Empty(t, r.Errors, r.Raw)
	r = b.do(t, b.platform, `{ runners(first: 200) { nodes { id name capacity { cores memoryMiB } gpus { index name healthy } labels { key value } health { name ok } } } }`, nil)
	require.Empty(t, r.Errors, r.Raw)
	r = b.do(t, b.memberA, introspection, nil)
	require.Empty(t, r.Errors, r.Raw)
}

func TestQueryDepthIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	deep := "id"
	for range 6 {
		deep = "pools { organisation { " + deep + " } }"
	}
	r := b.do(t, b.memberA, "{ organisations { "+deep+" } }", nil) // 13 levels
	require.Equal(t, "BAD_INPUT", r.code(), r.Raw)
	require.Contains(t, r.Errors[0].Message, "query depth 14 is over the limit of 10")
	// Through fragments as well.
	r = b.do(t, b.memberA, `{ organisations { ...p } } fragment p on Organisation { pools { organisation { pools { organisation { pools { organisation { pools { organisation { pools { organisation { id } } } } } } } } } } }`, nil)
	require.Equal(t, "BAD_INPUT", r.code(), r.Raw)
	r = b.do(t, b.memberA, `{ viewer { organisation { pools { organisation { pools { id name } } } } } }`, nil)
	require.Empty(t, r.Errors, r.Raw)
}

func TestAnswersAreBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *graph.Options) { o.MaxResponseBytes = 200 })
	r := b.do(t, b.platform, `{ organisations { id name pools { id name } } }`, nil)
	require.Equal(t, "TOO_LARGE", r.code(), r.Raw)
	require.Less(t, len(r.Raw), 300)
	r = b.do(t, b.platform, `{ viewer { role } }`, nil)
	require.Empty(t, r.Errors, r.Raw)
}

// introspection is the query GraphQL tools (the playground among them)
// send first; its type references nest seven deep by themselves.
const introspection = `query IntrospectionQuery { __schema { queryType { name } mutationType { name } subscriptionType { name }
  types { ...FullType } directives { name description locations args { ...InputValue } } } }
fragment FullType on __Type { kind name description fields(includeDeprecated: true) { name description args { ...InputValue }
  type { ...TypeRef } isDeprecated deprecationReason } inputFields { ...InputValue } interfaces { ...TypeRef }
  enumValues(includeDeprecated: true) { name description isDeprecated deprecationReason } possibleTypes { ...TypeRef } }
fragment InputValue on __InputValue { name description type { ...TypeRef } defaultValue }
fragment TypeRef on __Type { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name
  ofType { kind name ofType { kind name ofType { kind name } } } } } } } }`
