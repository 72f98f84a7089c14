// Package chattemplate renders Hugging Face chat templates (Jinja2 source
// files such as chat_template.jinja) the way transformers'
// apply_chat_template does.
//
// It contains a small Jinja2 interpreter written for this purpose: a lexer
// with trim_blocks, lstrip_blocks and the "-"/"+" whitespace markers, a
// parser for the statements and expressions chat templates use (if, for with
// loop controls and the loop object, set and namespace, macro, filter and set
// blocks, raw, with), and an evaluator with Python semantics for the values a
// template sees: Python str() and repr() of numbers, strings, lists and dicts,
// Python string methods, Jinja's Undefined, the sandbox's refusal of mutating
// methods, and transformers' tojson (json.dumps without ASCII escaping).
//
// Dicts keep their key order, as Python's do; DecodeJSON reads JSON into
// *Object values so that a request's key order and number literals reach the
// template unchanged.
package chattemplate
