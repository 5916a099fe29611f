package client_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/correx/sessions/pkg/client"
)

// TestStructuredOptions: the failure and approval options write the payload
// members the service reads.
func TestStructuredOptions(t *testing.T) {
	for _, tt := range []struct {
		ev   client.Event
		want map[string]any
	}{
		{client.SessionFailed("s", "503", client.FailureCategory("provider"), client.FailureCode("http.503"), client.Retryable()),
			map[string]any{"reason": "503", "category": "provider", "code": "http.503", "retryable": true}},
		{client.ApprovalRequested("s", client.RequestID("deploy-42"), client.ApprovalReason("deploy")),
			map[string]any{"requestId": "deploy-42", "reason": "deploy"}},
		{client.ApprovalDenied("s", client.RequestID("deploy-42"), client.DecidedBy("bob"), client.ApprovalReason("risky")),
			map[string]any{"requestId": "deploy-42", "by": "bob", "reason": "risky"}},
		{client.CancellationRequested("s", "stop", client.Forced),
			map[string]any{"reason": "stop", "mode": "forced"}},
	} {
		var got map[string]any
		if err := json.Unmarshal(tt.ev.Payload, &got); err != nil {
			t.Fatalf("%s: %v (%s)", tt.ev.Type, err, tt.ev.Payload)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s payload %v, want %v", tt.ev.Type, got, tt.want)
		}
	}
}
