// The YAML config file (--config), parsed with libyaml: one document, a mapping of sections
// (pipeline, model, optimizer, data, checkpoint, logging) of scalar keys, each handed to the
// caller's setter as "section.key" and its value. A repeated section or key and a second document
// are refused with their line.
#include <stdio.h>
#include <string.h>
#include <yaml.h>
#include "config.h"
#include "llmc/common.h"

static size_t line_of(const yaml_node_t* n) { return n->start_mark.line + 1; }

// a scalar with a NUL inside would be read as its prefix: a different key or value than written
static int scalar_has_nul(const yaml_node_t* n) { return strlen((const char*)n->data.scalar.value) != n->data.scalar.length; }

// the earlier pair of m whose key equals pair p's key (both scalars), or NULL
static const yaml_node_t* earlier_same_key(yaml_document_t* doc, const yaml_node_t* m, const yaml_node_pair_t* p) {
    const yaml_node_t* k = yaml_document_get_node(doc, p->key);
    for (const yaml_node_pair_t* q = m->data.mapping.pairs.start; q < p; q++) {
        const yaml_node_t* o = yaml_document_get_node(doc, q->key);
        if (o->type == YAML_SCALAR_NODE && o->data.scalar.length == k->data.scalar.length &&
            memcmp(o->data.scalar.value, k->data.scalar.value, k->data.scalar.length) == 0)
            return o;
    }
    return NULL;
}

static int apply_document(ConfigSetFn set, void* ctx, const char* path, yaml_document_t* doc, char* err, size_t errlen) {
    yaml_node_t* root = yaml_document_get_root_node(doc);
    if (!root) return 0; // an empty file sets nothing
    if (root->type != YAML_MAPPING_NODE)
        return td_error(err, errlen, "%s:%zu: the top level must be a mapping of sections", path, line_of(root));
    for (yaml_node_pair_t* sp = root->data.mapping.pairs.start; sp < root->data.mapping.pairs.top; sp++) {
        yaml_node_t* sk = yaml_document_get_node(doc, sp->key);
        yaml_node_t* sv = yaml_document_get_node(doc, sp->value);
        if (sk->type != YAML_SCALAR_NODE || sv->type != YAML_MAPPING_NODE || scalar_has_nul(sk))
            return td_error(err, errlen, "%s:%zu: each top-level key must name a section holding a mapping", path, line_of(sk));
        const char* section = (const char*)sk->data.scalar.value;
        const yaml_node_t* first = earlier_same_key(doc, root, sp);
        if (first)
            return td_error(err, errlen, "%s:%zu: section '%s' appears twice (first at line %zu)", path, line_of(sk), section, line_of(first));
        // a section given as an alias (`model: *p`) holds the anchored mapping's own nodes, whose
        // lines are the anchor's: its errors are put at the section's line and name the anchor's
        int aliased = sv->start_mark.line < sk->start_mark.line;
        char from[64] = "";
        if (aliased) snprintf(from, sizeof(from), " (in the mapping anchored at line %zu)", line_of(sv));
        for (yaml_node_pair_t* kp = sv->data.mapping.pairs.start; kp < sv->data.mapping.pairs.top; kp++) {
            yaml_node_t* k = yaml_document_get_node(doc, kp->key);
            yaml_node_t* v = yaml_document_get_node(doc, kp->value);
            size_t line = aliased ? line_of(sk) : line_of(k);
            if (k->type != YAML_SCALAR_NODE || v->type != YAML_SCALAR_NODE)
                return td_error(err, errlen, "%s:%zu: '%s' must map keys to plain values%s", path, line, section, from);
            if (scalar_has_nul(k) || scalar_has_nul(v))
                return td_error(err, errlen, "%s:%zu: '%s': a key or value holds a NUL character%s", path, line, section, from);
            char key[256], msg[512];
            snprintf(key, sizeof(key), "%s.%s", section, (const char*)k->data.scalar.value);
            if (v->data.scalar.length == 0 && v->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) // `train:` alone is YAML's null
                return td_error(err, errlen, "%s:%zu: key '%s' has no value%s", path, line, key, from);
            if ((first = earlier_same_key(doc, sv, kp)) != NULL)
                return td_error(err, errlen, "%s:%zu: key '%s' appears twice (first at line %zu)%s", path, line, key, line_of(first), from);
            if (set(ctx, key, (const char*)v->data.scalar.value, msg, sizeof(msg)))
                return td_error(err, errlen, "%s:%zu: %s%s", path, line, msg, from);
        }
    }
    return 0;
}

// a config is a few hundred bytes; libyaml's loader takes time that grows as the square of the nesting
// depth (200,000 levels of '[', 200 KB: still parsing after a minute), so a file far past any config is refused unread
#define CONFIG_MAX_BYTES (64 * 1024)

int config_load_yaml(const char* path, ConfigSetFn set, void* ctx, char* err, size_t errlen) {
    FILE* f = td_fopen_regular(path, "YAML config", NULL, err, errlen);
    if (!f) return -1;
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0 || size > CONFIG_MAX_BYTES) {
        fclose(f);
        if (size < 0) return td_error(err, errlen, "%s: cannot measure the file", path);
        return td_error(err, errlen, "%s: %ld bytes, more than a config file's %d at most (a config holds a few sections of keys)", path, size, CONFIG_MAX_BYTES);
    }
    yaml_parser_t parser;
    yaml_document_t doc, next;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_file(&parser, f);
    int rc = -1;
    if (!yaml_parser_load(&parser, &doc)) {
        td_error(err, errlen, "%s:%zu: YAML error: %s", path, parser.problem_mark.line + 1, parser.problem ? parser.problem : "?");
        goto parser_done;
    }
    // a second document would otherwise be ignored without a word; the end of the stream loads
    // as a document without a root node
    if (!yaml_parser_load(&parser, &next)) {
        td_error(err, errlen, "%s:%zu: YAML error: %s", path, parser.problem_mark.line + 1, parser.problem ? parser.problem : "?");
        goto doc_done;
    }
    int second = yaml_document_get_root_node(&next) != NULL;
    if (second) td_error(err, errlen, "%s:%zu: a second YAML document (after '---'): a config file holds one", path, next.start_mark.line + 1);
    yaml_document_delete(&next);
    if (!second) rc = apply_document(set, ctx, path, &doc, err, errlen);
doc_done:
    yaml_document_delete(&doc);
parser_done:
    yaml_parser_delete(&parser);
    fclose(f);
    return rc;
}
