use super::*;

#[test]
fn paths_are_made_relative_to_the_root_or_left_absolute_outside_it() {
    let root = Path::new("/ws");
    assert_eq!(
        workspace_path(root, Path::new("/ws/src"), "a.rs"),
        "src/a.rs"
    );
    assert_eq!(workspace_path(root, Path::new("/ws"), "/ws/b/c"), "b/c");
    assert_eq!(workspace_path(root, Path::new("/ws"), "."), "");
    assert_eq!(
        workspace_path(root, Path::new("/ws/src"), "../../etc/passwd"),
        "/etc/passwd"
    );
    assert_eq!(workspace_path(root, Path::new("/ws"), "/wsx/a"), "/wsx/a");
}

#[test]
fn a_codex_patch_is_rebased_onto_the_root() {
    let patch = "*** Begin Patch\n*** Add File: a.txt\n+x\n*** Update File: b.rs\n*** Move to: c.rs\n@@\n-a\n+b\n*** End Patch\n";
    assert_eq!(
        rebase_patch(patch, "sub"),
        "*** Begin Patch\n*** Add File: sub/a.txt\n+x\n*** Update File: sub/b.rs\n*** Move to: sub/c.rs\n@@\n-a\n+b\n*** End Patch\n"
    );
    assert_eq!(rebase_patch(patch, ""), patch);
}

#[test]
fn gemini_calls_have_a_key_made_of_their_content() {
    let event = |input: &str| {
        AgentEvent::parse(
            Agent::Gemini,
            format!(r#"{{"hook_event_name":"BeforeTool","session_id":"s","tool_name":"write_file","tool_input":{input}}}"#).as_bytes(),
        )
        .unwrap()
    };
    let before = event(r#"{"file_path":"a","content":"x"}"#);
    let mut after = before.clone();
    after.phase = Phase::Post;
    assert_eq!(before.call_key(), after.call_key());
    assert_ne!(
        before.call_key(),
        event(r#"{"file_path":"a","content":"y"}"#).call_key()
    );
}
