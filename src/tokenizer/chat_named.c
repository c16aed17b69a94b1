/* chat_named.c - llama.cpp's built-in chat template names (--chat-template
 * NAME), each as a Jinja template that renders what llama.cpp's own
 * formatter for that name writes (its llm_chat_apply_template): the same
 * markers, the same trimming, the assistant's turn opened when asked. */
#include <string.h>

#include "tokenizer/tokenizer.h"

/* Jinja source lines, joined; every tag strips the whitespace around it, so
 * only the quoted strings reach the output. */
static const struct {
    const char *name, *text;
} named[] = {
    {"chatml",
     "{%- for m in messages -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' -}}"
     "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"},
    {"llama3",
     "{%- for m in messages -%}{{- '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + "
     "(m['content'] | trim) + '<|eot_id|>' -}}{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"},
    /* llama2: a system message joins the first turn as plain text; llama2-sys: in <<SYS>> */
    {"llama2",
     "{%- set ns = namespace(inside=true) -%}{{- '[INST] ' -}}{%- for m in messages -%}"
     "{%- if not ns.inside -%}{{- '[INST] ' -}}{%- set ns.inside = true -%}{%- endif -%}"
     "{%- if m['role'] == 'system' -%}{{- m['content'] + '\\n' -}}"
     "{%- elif m['role'] == 'user' -%}{{- m['content'] + ' [/INST]' -}}"
     "{%- else -%}{{- m['content'] + '</s>' -}}{%- set ns.inside = false -%}{%- endif -%}{%- endfor -%}"},
    {"llama2-sys",
     "{%- set ns = namespace(inside=true) -%}{{- '[INST] ' -}}{%- for m in messages -%}"
     "{%- if not ns.inside -%}{{- '[INST] ' -}}{%- set ns.inside = true -%}{%- endif -%}"
     "{%- if m['role'] == 'system' -%}{{- '<<SYS>>\\n' + m['content'] + '\\n<</SYS>>\\n\\n' -}}"
     "{%- elif m['role'] == 'user' -%}{{- m['content'] + ' [/INST]' -}}"
     "{%- else -%}{{- m['content'] + '</s>' -}}{%- set ns.inside = false -%}{%- endif -%}{%- endfor -%}"},
    {"mistral-v7",
     "{%- for m in messages -%}{%- if m['role'] == 'system' -%}{{- '[SYSTEM_PROMPT] ' + m['content'] + "
     "'[/SYSTEM_PROMPT]' -}}{%- elif m['role'] == 'user' -%}{{- '[INST] ' + m['content'] + '[/INST]' -}}"
     "{%- else -%}{{- ' ' + m['content'] + '</s>' -}}{%- endif -%}{%- endfor -%}"},
    {"mistral-v7-tekken",
     "{%- for m in messages -%}{%- if m['role'] == 'system' -%}{{- '[SYSTEM_PROMPT]' + m['content'] + "
     "'[/SYSTEM_PROMPT]' -}}{%- elif m['role'] == 'user' -%}{{- '[INST]' + m['content'] + '[/INST]' -}}"
     "{%- else -%}{{- m['content'] + '</s>' -}}{%- endif -%}{%- endfor -%}"},
    {"phi3",
     "{%- for m in messages -%}{{- '<|' + m['role'] + '|>\\n' + m['content'] + '<|end|>\\n' -}}{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"},
    {"zephyr",
     "{%- for m in messages -%}{{- '<|' + m['role'] + '|>\\n' + m['content'] + '<|endoftext|>\\n' -}}"
     "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"},
    /* gemma: no system turn - its text (trimmed) opens the next user turn;
     * the assistant is "model" */
    {"gemma",
     "{%- set ns = namespace(sys='') -%}{%- for m in messages -%}"
     "{%- if m['role'] == 'system' -%}{%- set ns.sys = ns.sys + (m['content'] | trim) -%}"
     "{%- else -%}{%- if m['role'] == 'assistant' -%}{%- set role = 'model' -%}{%- else -%}"
     "{%- set role = m['role'] -%}{%- endif -%}{{- '<start_of_turn>' + role + '\\n' -}}"
     "{%- if ns.sys and role != 'model' -%}{{- ns.sys + '\\n\\n' -}}{%- set ns.sys = '' -%}{%- endif -%}"
     "{{- (m['content'] | trim) + '<end_of_turn>\\n' -}}{%- endif -%}{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}"},
    {"vicuna",
     "{%- for m in messages -%}{%- if m['role'] == 'system' -%}{{- m['content'] + '\\n\\n' -}}"
     "{%- elif m['role'] == 'user' -%}{{- 'USER: ' + m['content'] + '\\n' -}}"
     "{%- elif m['role'] == 'assistant' -%}{{- 'ASSISTANT: ' + m['content'] + '</s>\\n' -}}{%- endif -%}"
     "{%- endfor -%}{%- if add_generation_prompt -%}{{- 'ASSISTANT:' -}}{%- endif -%}"},
    {"deepseek",
     "{%- for m in messages -%}{%- if m['role'] == 'system' -%}{{- m['content'] -}}"
     "{%- elif m['role'] == 'user' -%}{{- '### Instruction:\\n' + m['content'] + '\\n' -}}"
     "{%- elif m['role'] == 'assistant' -%}{{- '### Response:\\n' + m['content'] + '\\n<|EOT|>\\n' -}}"
     "{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}{{- '### Response:\\n' -}}{%- endif -%}"},
};

const char *rf_chat_template_named(const char *name) {
    for (size_t i = 0; i < sizeof named / sizeof *named; i++)
        if (!strcmp(name, named[i].name)) return named[i].text;
    return NULL;
}

const char *rf_chat_template_names(void) {
    return "chatml, llama3, llama2, llama2-sys, mistral-v7, mistral-v7-tekken, phi3, zephyr, gemma, vicuna, deepseek";
}
