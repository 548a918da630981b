/**
 * The Responses API's wire side for the scripted model (test/support/scripted-model.ts): an
 * answer as the server-sent events Codex reads, and the text of the tool outputs it sends back.
 */
import type { ScriptedAnswer } from './scripted-model.ts';

/** Text of a `function_call_output.output`, which is a string or an array of content items. */
export function outputText(output: unknown): string | undefined {
  if (typeof output === 'string') return output;
  if (Array.isArray(output)) {
    return output
      .map((part: unknown) =>
        typeof part === 'object' && part !== null && typeof (part as { text?: unknown }).text === 'string'
          ? (part as { text: string }).text
          : '',
      )
      .join('');
  }
  if (typeof output === 'object' && output !== null && typeof (output as { content?: unknown }).content === 'string') {
    return (output as { content: string }).content;
  }
  return undefined;
}

function sseEvent(data: Record<string, unknown> & { type: string }): string {
  return `event: ${data.type}\ndata: ${JSON.stringify(data)}\n\n`;
}

/** The SSE body for one answer. */
export function sseForAnswer(answer: ScriptedAnswer, responseId: string, itemId: string): string {
  const item: Record<string, unknown> =
    answer.type === 'function_call'
      ? {
          type: 'function_call',
          id: itemId,
          call_id: answer.call_id,
          name: answer.name,
          arguments: answer.arguments,
          status: 'completed',
        }
      : answer.type === 'custom_tool_call'
        ? {
            type: 'custom_tool_call',
            id: itemId,
            call_id: answer.call_id,
            name: answer.name,
            input: answer.input,
            status: 'completed',
          }
        : {
            type: 'message',
            id: itemId,
            role: 'assistant',
            status: 'completed',
            content: [{ type: 'output_text', text: answer.text, annotations: [] }],
          };
  const usage = {
    input_tokens: 0,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: 0,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 0,
  };
  return [
    sseEvent({
      type: 'response.created',
      response: { id: responseId, object: 'response', status: 'in_progress', output: [] },
    }),
    sseEvent({ type: 'response.output_item.added', output_index: 0, item }),
    sseEvent({ type: 'response.output_item.done', output_index: 0, item }),
    sseEvent({
      type: 'response.completed',
      response: { id: responseId, object: 'response', status: 'completed', output: [item], usage },
    }),
  ].join('');
}
