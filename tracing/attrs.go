package tracing

import "go.opentelemetry.io/otel/attribute"

// Attribute keys of the fleet's spans. The gen_ai.* keys are the OpenTelemetry
// GenAI semantic conventions'; the aetherium.* keys are the fleet's own.
const (
	GenAIOperationName    = attribute.Key("gen_ai.operation.name")
	GenAISystem           = attribute.Key("gen_ai.system")
	GenAIProviderName     = attribute.Key("gen_ai.provider.name")
	GenAIRequestModel     = attribute.Key("gen_ai.request.model")
	GenAIRequestMaxTokens = attribute.Key("gen_ai.request.max_tokens")
	GenAIResponseModel    = attribute.Key("gen_ai.response.model")
	GenAIFinishReasons    = attribute.Key("gen_ai.response.finish_reasons")
	GenAIInputTokens      = attribute.Key("gen_ai.usage.input_tokens")
	GenAIOutputTokens     = attribute.Key("gen_ai.usage.output_tokens")
	GenAIAgentName        = attribute.Key("gen_ai.agent.name")
	GenAIInputMessages    = attribute.Key("gen_ai.input.messages")
	GenAIOutputMessages   = attribute.Key("gen_ai.output.messages")
	GenAIToolName         = attribute.Key("gen_ai.tool.name")
	GenAIToolCallID       = attribute.Key("gen_ai.tool.call.id")
	RunID                 = attribute.Key("aetherium.run.id")
	DelegationID          = attribute.Key("aetherium.delegation.id")
	Role                  = attribute.Key("aetherium.role")
	Template              = attribute.Key("aetherium.template")
	Trigger               = attribute.Key("aetherium.trigger")
	ToolTier              = attribute.Key("aetherium.tool.tier")
	ToolOutcome           = attribute.Key("aetherium.tool.outcome")
	ToolDenyLayer         = attribute.Key("aetherium.tool.deny_layer")
	TaskType              = attribute.Key("aetherium.task.type")
	ApprovalID            = attribute.Key("aetherium.approval.id")
	ApprovalKind          = attribute.Key("aetherium.approval.kind")
	ApprovalStatus        = attribute.Key("aetherium.approval.status")
	SandboxExecutor       = attribute.Key("aetherium.sandbox.executor")
	SandboxNetwork        = attribute.Key("aetherium.sandbox.network")
	SandboxExitCode       = attribute.Key("aetherium.sandbox.exit_code")
	SandboxTimedOut       = attribute.Key("aetherium.sandbox.timed_out")
	SandboxOutputBytes    = attribute.Key("aetherium.sandbox.output_bytes")
)

// Span names of the fleet's own operations (beside the GenAI ones).
const (
	SpanSandboxExec  = "sandbox exec"
	SpanApprovalWait = "approval wait"
	// EventApprovalRequested is the event on a tool call's span when the
	// call parks for a person's decision.
	EventApprovalRequested = "approval requested"
)

// GenAI operation names (GenAIOperationName).
const (
	OpChat        = "chat"
	OpInvokeAgent = "invoke_agent"
	OpExecuteTool = "execute_tool"
)
