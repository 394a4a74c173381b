//! The `group` nodes inside `optimizer` → [`ParamGroup`]s: parameters by glob patterns,
//! each group setting only keys its optimizer takes. Which parameters a pattern matches
//! is known once the model is built (`pipeline_core::param_groups`).

use crate::diagnostic::Diagnostic;
use crate::manifest::{Optimizer, ParamGroup};
use crate::optimizers::{GROUP, GROUP_KEYS};
use crate::reader::Reader;
use kdl::KdlNode;

impl<'a> Reader<'a> {
    /// The groups of the `optimizer` node `node`, of kind `kind`.
    pub(crate) fn param_groups(
        &mut self,
        node: Option<&KdlNode>,
        kind: Optimizer,
    ) -> Vec<ParamGroup> {
        let mut groups = Vec::new();
        for (i, child) in node
            .and_then(KdlNode::children)
            .map_or(&[][..], |c| c.nodes())
            .iter()
            .enumerate()
        {
            if child.name().value() != GROUP.name {
                continue; // a key, read with the section's
            }
            // `--set` cannot reach a group: the path has a space.
            let path = ["optimizer".to_string(), format!("group {i}")];
            let f = self.read(Some(child), &GROUP, &path, "optimizer.group");
            let params = f.texts("params");
            self.bad_patterns(&params);
            for key in GROUP_KEYS.iter().filter(|k| !kind.takes(k)) {
                if f.value(key).is_some() {
                    self.diags.push(
                        Diagnostic::error(
                            "pipeline::optimizer::group_key_not_for_kind",
                            format!("`{}` has no `{key}` for a group to set", kind.as_str()),
                        )
                        .label_opt(f.span(key), format!("not a setting of `{}`", kind.as_str()))
                        .help(format!(
                            "a group sets {} of `{}`",
                            GROUP_KEYS
                                .iter()
                                .filter(|k| kind.takes(k))
                                .map(|k| format!("`{k}`"))
                                .collect::<Vec<_>>()
                                .join(", "),
                            kind.as_str()
                        )),
                    );
                }
            }
            let own = |key: &str| kind.takes(key).then(|| f.opt_float(key)).flatten();
            groups.push(ParamGroup {
                params,
                lr: own("lr"),
                weight_decay: own("weight-decay"),
                momentum: own("momentum"),
                beta1: own("beta1"),
                beta2: own("beta2"),
                eps: own("eps"),
                span: Some(child.name().span()),
            });
        }
        groups
    }
}
