//! The Cognito pre-token-generation trigger (`functions/token`) under the real
//! `cargo lambda watch`, invoked with `cargo lambda invoke` and a client-credentials event in
//! the shape Cognito sends (version 3, `tests/fixtures/events/`): the app client's organization
//! comes back as the access token's `org_id`, and a client the map does not name is refused.

use integration_tests::watch::{CALL, FIRST_CALL, Watch, root};
use serde_json::json;

const EVENT: &str = "tests/fixtures/events/cognito_pre_token_client_credentials.json";
const CLIENT: &str = "1example23456789abcdefghij";
const ORG: &str = "0190d6a2-7b3c-7def-8a12-3456789abcde";

#[tokio::test]
async fn the_trigger_adds_the_clients_organization_and_refuses_an_unknown_client() {
    let fixture = root().join(EVENT);
    let fixture = fixture.to_str().unwrap();

    let mapped = Watch::start(&[
        (
            "CLIENT_ORGANIZATIONS",
            format!("other-client=0190d6a2-0000-7000-8000-000000000001,{CLIENT}={ORG}"),
        ),
        ("RUST_LOG", "info".into()),
    ])
    .await;
    let answer = mapped.invoke("token", fixture, FIRST_CALL).await;
    assert_eq!(
        answer["response"]["claimsAndScopeOverrideDetails"],
        json!({"accessTokenGeneration": {"claimsToAddOrOverride": {"org_id": ORG}}}),
        "{answer}"
    );
    assert_eq!(answer["callerContext"]["clientId"], CLIENT, "{answer}");
    drop(mapped);

    let unmapped = Watch::start(&[(
        "CLIENT_ORGANIZATIONS",
        "other-client=0190d6a2-0000-7000-8000-000000000001".into(),
    )])
    .await;
    let refused = unmapped.invoke_raw("token", fixture, CALL).await;
    assert!(!refused.success, "{refused:?}");
    let said = format!("{}{}", refused.stdout, refused.stderr);
    assert!(
        said.contains("TokenRefused")
            && said.contains(&format!("app client {CLIENT} acts for no organization")),
        "{refused:?}"
    );
}
