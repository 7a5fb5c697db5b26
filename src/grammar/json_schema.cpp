// JSON Schema (a common subset, docs/GRAMMAR.md) -> GBNF.
//
// Output is compact JSON: no whitespace except at most one space after ':' and ','; object
// keys in schema order, optional ones omittable; strings as JSON strings (escapes, no raw
// control characters); numbers as JSON numbers with bounded digit counts.
#include <cstdarg>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"
#include "grammar/grammar.h"
#include "platform/compiler.h"

namespace llmkv {
namespace {

using Json = nlohmann::ordered_json;  // keeps "properties" in schema order

const char *const kPrimitives[][2] = {
    {"value", "object | array | string | number | boolean | null"},
    {"object", "\"{\" ( string \":\" sp value ( \",\" sp string \":\" sp value )* )? \"}\""},
    {"array", "\"[\" ( value ( \",\" sp value )* )? \"]\""},
    {"string", "\"\\\"\" char* \"\\\"\""},
    // \uXXXX: not a lone surrogate (JSON parsers refuse one); a high surrogate only with
    // the \uXXXX low surrogate after it.
    {"char",
     R"([^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | )"
     R"([dD] [0-7] [0-9a-fA-F]{2} | [dD] [89abAB] [0-9a-fA-F]{2} "\\u" [dD] [c-fC-F] [0-9a-fA-F]{2} ) ))"},
    {"number", "integer ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?"},
    {"integer", "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} )"},
    {"boolean", "\"true\" | \"false\""},
    {"null", "\"null\""},
    {"sp", "\" \"?"},
};

// What each primitive uses (so that only the needed ones are emitted).
const std::map<std::string, std::vector<std::string>> kPrimitiveDeps = {
    {"value", {"object", "array", "string", "number", "boolean", "null"}},
    {"object", {"string", "sp", "value"}},
    {"array", {"value", "sp"}},
    {"string", {"char"}},
    {"number", {"integer"}},
};

const std::set<std::string> kAnnotations = {"title",    "description", "$schema", "$id",
                                            "examples", "default",     "$comment"};
const std::set<std::string> kKeywords = {
    "type",     "properties", "required",  "additionalProperties",
    "enum",     "const",      "items",     "minItems",
    "maxItems", "minLength",  "maxLength", "anyOf",
    "oneOf",    "$ref",       "$defs",     "definitions"};

std::string pointer_token(const std::string &key) {
    std::string out;
    for (char c : key) {
        if (c == '~')
            out += "~0";
        else if (c == '/')
            out += "~1";
        else
            out += c;
    }
    return out;
}

std::string unescape_pointer_token(const std::string &tok) {
    std::string out;
    for (size_t i = 0; i < tok.size(); ++i) {
        if (tok[i] == '~' && i + 1 < tok.size() && (tok[i + 1] == '0' || tok[i + 1] == '1')) {
            out += tok[i + 1] == '0' ? '~' : '/';
            ++i;
        } else {
            out += tok[i];
        }
    }
    return out;
}

// A GBNF string literal matching exactly `bytes`.
std::string literal(const std::string &bytes) {
    std::string out = "\"";
    for (unsigned char c : bytes) {
        if (c == '"')
            out += "\\\"";
        else if (c == '\\')
            out += "\\\\";
        else if (c == '\n')
            out += "\\n";
        else if (c == '\r')
            out += "\\r";
        else if (c == '\t')
            out += "\\t";
        else if (c < 0x20 || c == 0x7F)
            out += strprintf("\\x%02X", c);
        else
            out += static_cast<char>(c);
    }
    return out + "\"";
}

class Converter {
public:
    explicit Converter(const Json &root) : root_(root) {
        for (const auto &p : kPrimitives) used_names_.insert(p[0]);
    }

    std::string run() {
        reserve("root");
        std::string body = expr(root_, "", "root", 0);
        set_rule("root", body);
        std::string out;
        for (const auto &[name, b] : rules_) out += name + " ::= " + b + "\n";
        // Primitives (and what they use), in a fixed order.
        std::set<std::string> need;
        std::vector<std::string> todo(needed_.begin(), needed_.end());
        while (!todo.empty()) {
            std::string n = todo.back();
            todo.pop_back();
            if (!need.insert(n).second) continue;
            auto it = kPrimitiveDeps.find(n);
            if (it != kPrimitiveDeps.end())
                for (const auto &d : it->second) todo.push_back(d);
        }
        for (const auto &p : kPrimitives)
            if (need.count(p[0])) out += std::string(p[0]) + " ::= " + p[1] + "\n";
        return out;
    }

    // Rule name -> the JSON pointer of the schema it came from (for compile errors).
    const std::map<std::string, std::string> &rule_pointers() const { return rule_ptr_; }

    [[noreturn]] static void error(const std::string &ptr, const char *fmt, ...)
        LLMKV_PRINTF_FORMAT(2, 3) {
        va_list ap;
        va_start(ap, fmt);
        char buf[512];
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        fail(LLMKV_ERR_INVALID_ARGUMENT, "json schema: at %s: %s",
             ptr.empty() ? "(root)" : ptr.c_str(), buf);
    }

private:
    std::string prim(const char *name) {
        needed_.insert(name);
        return name;
    }

    std::string unique(const std::string &hint) {
        std::string base;
        for (char c : hint) {
            bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
            if (ok)
                base += c;
            else if (!base.empty() && base.back() != '-')
                base += '-';
        }
        while (!base.empty() && base.back() == '-') base.pop_back();
        if (base.size() > 48) base.resize(48);
        if (base.empty()) base = "s";
        std::string name = base;
        for (int k = 2; used_names_.count(name); ++k) name = base + "-" + std::to_string(k);
        used_names_.insert(name);
        return name;
    }
    void reserve(const std::string &name) {
        used_names_.insert(name);
        slot_[name] = rules_.size();
        rules_.push_back({name, ""});
    }
    void set_rule(const std::string &name, const std::string &body) {
        rules_[slot_[name]].second = body;
    }
    std::string new_rule(const std::string &hint, const std::string &body, const std::string &ptr) {
        std::string name = unique(hint);
        reserve(name);
        set_rule(name, body);
        rule_ptr_[name] = ptr;
        return name;
    }

    static uint64_t count_kw(const Json &s, const char *kw, const std::string &ptr) {
        const Json &v = s[kw];
        if (!v.is_number_unsigned()) error(ptr + "/" + kw, "%s must be a non-negative integer", kw);
        uint64_t n = v.get<uint64_t>();
        if (n > Grammar::kMaxRepetition)
            error(ptr + "/" + kw, "%s %llu is above the supported %u", kw,
                  static_cast<unsigned long long>(n), Grammar::kMaxRepetition);
        return n;
    }

    static void check_keywords(const Json &s, const std::string &ptr) {
        for (auto it = s.begin(); it != s.end(); ++it) {
            if (kAnnotations.count(it.key()) || kKeywords.count(it.key())) continue;
            error(ptr + "/" + pointer_token(it.key()), "unsupported keyword '%s'",
                  it.key().c_str());
        }
    }

    // Keywords other than annotations and definitions.
    static std::vector<std::string> constraints(const Json &s) {
        std::vector<std::string> out;
        for (auto it = s.begin(); it != s.end(); ++it) {
            const std::string &k = it.key();
            if (!kAnnotations.count(k) && k != "$defs" && k != "definitions") out.push_back(k);
        }
        return out;
    }

    std::string ref(const Json &s, const std::string &ptr, int depth) {
        const Json &r = s["$ref"];
        if (!r.is_string()) error(ptr + "/$ref", "$ref must be a string");
        const std::string target = r.get<std::string>();
        auto it = ref_rules_.find(target);
        if (it != ref_rules_.end()) return it->second;
        std::string section, key;
        for (const char *prefix : {"#/$defs/", "#/definitions/"}) {
            std::string p = prefix;
            if (target.compare(0, p.size(), p) == 0 &&
                target.find('/', p.size()) == std::string::npos) {
                section = p.substr(2, p.size() - 3);
                key = unescape_pointer_token(target.substr(p.size()));
            }
        }
        if (section.empty())
            error(ptr + "/$ref",
                  "$ref '%s' is not supported (only #/$defs/NAME and #/definitions/NAME)",
                  target.c_str());
        if (!root_.is_object() || !root_.contains(section) || !root_[section].is_object() ||
            !root_[section].contains(key))
            error(ptr + "/$ref", "$ref '%s' names no definition", target.c_str());
        const std::string def_ptr = "/" + section + "/" + pointer_token(key);
        std::string name = unique("ref-" + key);
        reserve(name);
        rule_ptr_[name] = def_ptr;
        ref_rules_[target] = name;
        set_rule(name, expr(root_[section][key], def_ptr, name, depth + 1));
        return name;
    }

    static bool type_matches(const Json &v, const std::string &t) {
        if (t == "string") return v.is_string();
        if (t == "number") return v.is_number();
        if (t == "integer")
            return v.is_number_integer() ||
                   (v.is_number_float() &&
                    v.get<double>() ==
                        static_cast<double>(static_cast<long long>(v.get<double>())));
        if (t == "boolean") return v.is_boolean();
        if (t == "null") return v.is_null();
        if (t == "object") return v.is_object();
        if (t == "array") return v.is_array();
        return false;
    }

    std::vector<std::string> types(const Json &s, const std::string &ptr) {
        static const std::set<std::string> known = {"object",  "string", "number", "integer",
                                                    "boolean", "null",   "array"};
        std::vector<std::string> out;
        if (!s.contains("type")) return out;
        const Json &t = s["type"];
        auto add = [&](const Json &v, const std::string &p) {
            if (!v.is_string() || !known.count(v.get<std::string>()))
                error(p,
                      "type must be one of object, string, number, integer, boolean, null, array");
            out.push_back(v.get<std::string>());
        };
        if (t.is_array()) {
            if (t.empty()) error(ptr + "/type", "type is an empty array");
            for (size_t i = 0; i < t.size(); ++i) add(t[i], ptr + "/type/" + std::to_string(i));
        } else {
            add(t, ptr + "/type");
        }
        return out;
    }

    // A GBNF expression (parenthesized when it has alternatives) for schema `s`.
    std::string expr(const Json &s, const std::string &ptr, const std::string &hint, int depth) {
        if (depth > Grammar::kMaxNesting)
            error(ptr, "schemas nested deeper than %d", Grammar::kMaxNesting);
        if (s.is_boolean()) {
            if (!s.get<bool>()) error(ptr, "the schema false matches nothing");
            return prim("value");
        }
        if (!s.is_object()) error(ptr, "a schema must be an object or a boolean");
        check_keywords(s, ptr);
        if (depth > 0 && (s.contains("$defs") || s.contains("definitions"))) {
            const char *k = s.contains("$defs") ? "$defs" : "definitions";
            error(ptr + "/" + k, "%s is supported only at the root", k);
        }
        for (const char *k : {"$defs", "definitions"}) {
            if (depth == 0 && s.contains(k) && !s[k].is_object())
                error(ptr + "/" + k, "%s must be an object", k);
        }
        std::vector<std::string> cons = constraints(s);
        if (s.contains("$ref")) {
            if (cons.size() > 1) error(ptr, "$ref next to other keywords is not supported");
            return ref(s, ptr, depth);
        }
        for (const char *k : {"anyOf", "oneOf"}) {
            if (!s.contains(k)) continue;
            if (cons.size() > 1) error(ptr, "%s next to other keywords is not supported", k);
            const Json &list = s[k];
            if (!list.is_array() || list.empty())
                error(ptr + "/" + k, "%s must be a non-empty array", k);
            std::string body;
            for (size_t i = 0; i < list.size(); ++i) {
                std::string p = ptr + "/" + k + "/" + std::to_string(i);
                if (i) body += " | ";
                body += sub(list[i], p, hint + "-" + std::to_string(i), depth);
            }
            return "( " + body + " )";
        }
        std::vector<std::string> ts = types(s, ptr);
        if (s.contains("const") || s.contains("enum")) {
            std::vector<const Json *> values;
            if (s.contains("const")) {
                values.push_back(&s["const"]);
            } else {
                const Json &e = s["enum"];
                if (!e.is_array() || e.empty())
                    error(ptr + "/enum", "enum must be a non-empty array");
                for (const Json &v : e) values.push_back(&v);
            }
            std::string body;
            for (const Json *v : values) {
                bool ok = ts.empty();
                for (const auto &t : ts) ok = ok || type_matches(*v, t);
                if (!ok) continue;
                if (!body.empty()) body += " | ";
                body += literal(v->dump());
            }
            if (body.empty()) error(ptr, "no enum/const value has the schema's type");
            return "( " + body + " )";
        }
        if (ts.empty()) {
            if (s.contains("properties") || s.contains("required") ||
                s.contains("additionalProperties"))
                ts.push_back("object");
            else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems"))
                ts.push_back("array");
            else if (s.contains("minLength") || s.contains("maxLength"))
                ts.push_back("string");
            else
                return prim("value");
        }
        std::string body;
        for (const auto &t : ts) {
            if (!body.empty()) body += " | ";
            body += type_expr(t, s, ptr, hint, depth);
        }
        return ts.size() > 1 ? "( " + body + " )" : body;
    }

    // A rule name (or primitive) for a sub-schema.
    std::string sub(const Json &s, const std::string &ptr, const std::string &hint, int depth) {
        std::string e = expr(s, ptr, hint, depth + 1);
        bool simple = true;
        for (char c : e) simple = simple && c != ' ';
        if (simple) return e;  // a rule name already
        return new_rule(hint, e, ptr);
    }

    std::string type_expr(const std::string &t, const Json &s, const std::string &ptr,
                          const std::string &hint, int depth) {
        if (t == "number") return prim("number");
        if (t == "integer") return prim("integer");
        if (t == "boolean") return prim("boolean");
        if (t == "null") return prim("null");
        if (t == "string") {
            if (!s.contains("minLength") && !s.contains("maxLength")) return prim("string");
            uint64_t lo = s.contains("minLength") ? count_kw(s, "minLength", ptr) : 0;
            bool bounded = s.contains("maxLength");
            uint64_t hi = bounded ? count_kw(s, "maxLength", ptr) : 0;
            if (bounded && hi < lo) error(ptr + "/maxLength", "maxLength is below minLength");
            prim("char");
            std::string rep = bounded
                                  ? strprintf("{%llu,%llu}", static_cast<unsigned long long>(lo),
                                              static_cast<unsigned long long>(hi))
                                  : strprintf("{%llu,}", static_cast<unsigned long long>(lo));
            return "\"\\\"\" char" + rep + " \"\\\"\"";
        }
        if (t == "array") {
            std::string item;
            if (!s.contains("items")) {
                item = prim("value");
            } else {
                if (s["items"].is_array())
                    error(ptr + "/items", "items as an array (tuple form) is not supported");
                item = sub(s["items"], ptr + "/items", hint + "-item", depth);
            }
            uint64_t lo = s.contains("minItems") ? count_kw(s, "minItems", ptr) : 0;
            bool bounded = s.contains("maxItems");
            uint64_t hi = bounded ? count_kw(s, "maxItems", ptr) : 0;
            if (bounded && hi < lo) error(ptr + "/maxItems", "maxItems is below minItems");
            if (bounded && hi == 0) return "\"[\" \"]\"";
            prim("sp");
            std::string more = "( \",\" sp " + item + " )";
            uint64_t rlo = lo > 0 ? lo - 1 : 0;
            if (bounded)
                more += strprintf("{%llu,%llu}", static_cast<unsigned long long>(rlo),
                                  static_cast<unsigned long long>(hi - 1));
            else if (rlo == 0)
                more += "*";
            else
                more += strprintf("{%llu,}", static_cast<unsigned long long>(rlo));
            if (lo == 0) return "\"[\" ( " + item + " " + more + " )? \"]\"";
            return "\"[\" " + item + " " + more + " \"]\"";
        }
        // object
        if (s.contains("additionalProperties")) {
            const Json &a = s["additionalProperties"];
            if (!(a.is_boolean() && !a.get<bool>()))
                error(ptr + "/additionalProperties",
                      "additionalProperties other than false is not supported (objects have "
                      "exactly the "
                      "listed properties)");
        }
        std::vector<std::pair<std::string, const Json *>> props;
        if (s.contains("properties")) {
            const Json &p = s["properties"];
            if (!p.is_object()) error(ptr + "/properties", "properties must be an object");
            for (auto it = p.begin(); it != p.end(); ++it) props.push_back({it.key(), &it.value()});
        }
        std::set<std::string> required;
        if (s.contains("required")) {
            const Json &r = s["required"];
            if (!r.is_array())
                error(ptr + "/required", "required must be an array of property names");
            for (size_t i = 0; i < r.size(); ++i) {
                const std::string p = ptr + "/required/" + std::to_string(i);
                if (!r[i].is_string()) error(p, "required must be an array of property names");
                std::string k = r[i].get<std::string>();
                bool found = false;
                for (const auto &pr : props) found = found || pr.first == k;
                if (!found) error(p, "required property '%s' is not in properties", k.c_str());
                required.insert(k);
            }
        }
        if (props.empty()) return "\"{\" \"}\"";
        prim("sp");
        const size_t n = props.size();
        std::vector<std::string> kv(n);
        for (size_t i = 0; i < n; ++i) {
            const std::string pp = ptr + "/properties/" + pointer_token(props[i].first);
            std::string value = sub(*props[i].second, pp, hint + "-" + props[i].first, depth);
            kv[i] = literal(Json(props[i].first).dump() + ":") + " sp " + value;
        }
        // tail[i]: the members from i on, each preceded by a comma (optional ones omittable).
        std::vector<std::string> tail(n + 1);
        for (size_t i = n; i-- > 1;) {  // tail[0] is never used
            bool req = required.count(props[i].first) != 0;
            std::string body = req ? "\",\" sp " + kv[i] : "( \",\" sp " + kv[i] + " )?";
            if (!tail[i + 1].empty()) body += " " + tail[i + 1];
            tail[i] = new_rule(hint + "-rest" + std::to_string(i), body, ptr);
        }
        // The first member present is some j with every member before it optional.
        std::string alts;
        bool all_optional = true;
        for (size_t j = 0; j < n; ++j) {
            if (!alts.empty()) alts += " | ";
            alts += kv[j];
            if (j + 1 < n) alts += " " + tail[j + 1];
            if (required.count(props[j].first)) {
                all_optional = false;
                break;
            }
        }
        if (all_optional) return "\"{\" ( " + alts + " )? \"}\"";
        return "\"{\" ( " + alts + " ) \"}\"";
    }

    const Json &root_;
    std::vector<std::pair<std::string, std::string>> rules_;
    std::map<std::string, size_t> slot_;
    std::set<std::string> used_names_;
    std::set<std::string> needed_;
    std::map<std::string, std::string> ref_rules_;
    std::map<std::string, std::string> rule_ptr_;
};

// Refuses JSON nested deeper than the limit before the parser (and the value's destructor)
// sees it.
void check_depth(std::string_view text) {
    int depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < text.size(); ++i) {
        char c = text[i];
        if (in_string) {
            if (c == '\\')
                ++i;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > 2 * Grammar::kMaxNesting)
                fail(LLMKV_ERR_INVALID_ARGUMENT, "json schema: byte %zu: nested deeper than %d",
                     i + 1, 2 * Grammar::kMaxNesting);
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
}

struct Converted {
    std::string gbnf;
    std::shared_ptr<const Grammar> grammar;
};

Converted convert(std::string_view schema_json) {
    if (schema_json.size() > Grammar::kMaxTextBytes)
        fail(LLMKV_ERR_INVALID_ARGUMENT,
             "json schema: byte %zu: the text is longer than the limit of %zu bytes",
             Grammar::kMaxTextBytes + 1, Grammar::kMaxTextBytes);
    check_depth(schema_json);
    Json root;
    try {
        root = Json::parse(schema_json.begin(), schema_json.end());
    } catch (const nlohmann::json::parse_error &e) {
        std::string msg = e.what();
        size_t close = msg.find("] ");
        if (msg.rfind("[json.exception", 0) == 0 && close != std::string::npos)
            msg = msg.substr(close + 2);
        fail(LLMKV_ERR_INVALID_ARGUMENT, "json schema: byte %zu: %s", static_cast<size_t>(e.byte),
             msg.c_str());
    } catch (const nlohmann::json::exception &e) {  // a number out of range (out_of_range.406)
        std::string msg = e.what();
        size_t close = msg.find("] ");
        if (msg.rfind("[json.exception", 0) == 0 && close != std::string::npos)
            msg = msg.substr(close + 2);
        fail(LLMKV_ERR_INVALID_ARGUMENT, "json schema: %s", msg.c_str());
    }
    Converter c(root);
    Converted out;
    out.gbnf = c.run();
    try {
        out.grammar = Grammar::from_gbnf(out.gbnf, "root");
    } catch (const Error &e) {
        // Left recursion through $ref (a definition that refers to itself before matching
        // anything), or a schema too large once expanded.
        std::string msg = e.what();
        std::string ptr;
        size_t a = msg.find("rule '");
        if (a != std::string::npos) {
            size_t b = msg.find('\'', a + 6);
            auto it = c.rule_pointers().find(msg.substr(a + 6, b - a - 6));
            if (it != c.rule_pointers().end()) ptr = it->second;
        }
        if (msg.find("left-recursive") != std::string::npos)
            Converter::error(ptr, "the schema refers to itself before matching any input");
        Converter::error(ptr, "the generated grammar is refused: %s", msg.c_str());
    }
    return out;
}

}  // namespace

std::string json_schema_to_gbnf(std::string_view schema_json) {
    return convert(schema_json).gbnf;
}

std::shared_ptr<const Grammar> Grammar::from_json_schema(std::string_view schema_json) {
    return convert(schema_json).grammar;
}

}  // namespace llmkv
